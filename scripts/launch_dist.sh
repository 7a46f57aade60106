#!/usr/bin/env bash
# Sharded training with the same CLI (genrec-train) on N local processes, under torchrun, or under SLURM.
#
#   bash scripts/launch_dist.sh local 2 sharding=row_wise trainer.accelerator=cpu   # Lightning starts 2 processes
#   bash scripts/launch_dist.sh torchrun 4 sharding=planner                         # torchrun, 4 processes here
#   NNODES=2 NODE_RANK=0 MASTER_ADDR=node0 RUN_DIR=/shared/runs/x \
#       bash scripts/launch_dist.sh torchrun 8 sharding=row_wise                    # node 0 of 2 (same on node 1
#                                                                                   #  with NODE_RANK=1)
#   (tests/distributed/test_multinode_launch.py runs two such "nodes" on one machine and checks the result equals
#    one process's)
#   sbatch --nodes=2 --ntasks-per-node=8 --gpus-per-node=8 \
#       scripts/launch_dist.sh slurm 8 sharding=row_wise                            # one task per device
#
# The second argument is the number of processes per node (= trainer.devices); everything after it goes to
# genrec-train as Hydra overrides. Processes are one per device: gloo on CPU, NCCL on CUDA (sharding.backend
# overrides). Every process of a run must write to the same run folder (distributed checkpoints are one folder
# written by all ranks): this script fixes hydra.run.dir once, from RUN_DIR or the current time; with several
# nodes set RUN_DIR to a folder on a shared filesystem.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:?usage: launch_dist.sh local|torchrun|slurm PROCESSES_PER_NODE [overrides...]}
per_node=${2:?number of processes per node}
shift 2
run_dir=${RUN_DIR:-runs/dist/$(date +%Y-%m-%d_%H-%M-%S)}
python=${PYTHON:-python}

case "$mode" in
  local)
    exec "$python" -m genrec.train trainer.devices="$per_node" hydra.run.dir="$run_dir" "$@"
    ;;
  torchrun)
    nnodes=${NNODES:-1}
    exec "$python" -m torch.distributed.run --nproc_per_node="$per_node" --nnodes="$nnodes" \
      --node_rank="${NODE_RANK:-0}" --master_addr="${MASTER_ADDR:-127.0.0.1}" --master_port="${MASTER_PORT:-29500}" \
      -m genrec.train trainer.devices="$per_node" trainer.num_nodes="$nnodes" hydra.run.dir="$run_dir" "$@"
    ;;
  slurm)
    # sbatch runs this once per job; srun starts SLURM_NTASKS_PER_NODE tasks on each node (Lightning reads
    # SLURM's variables for ranks and the master address).
    exec srun "$python" -m genrec.train trainer.devices="$per_node" trainer.num_nodes="${SLURM_NNODES:-1}" \
      hydra.run.dir="$run_dir" "$@"
    ;;
  *)
    echo "launch_dist.sh: unknown mode '$mode' (local | torchrun | slurm)" >&2
    exit 2
    ;;
esac
