"""Objects built from a resolved config, shared by the CLIs: the data module, the task of ``cfg.model`` (retrieval
or generative, chosen by ``model.kind``) and a trained run loaded back from its folder."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from genrec.conf import compose_config
from genrec.data.datamodule import SequenceDataModule, load_dataset
from genrec.data.features import EncodedFeatures, FeatureConfig
from genrec.data.split import SplitConfig
from genrec.dist.checkpoint import load_weights, read_meta
from genrec.embedding.features import FeatureEmbedding
from genrec.errors import ConfigError, DataError
from genrec.data.schema import SequenceData
from genrec.models.losses import FullSoftmaxLoss
from genrec.models.prior_head import TransitionPrior
from genrec.models.recommender import SequentialRecommender
from genrec.runs import CHECKPOINT_DIR, RunFolder, file_digest
from genrec.trust import TRUSTED_TARGETS
from genrec.tokenize.sid_table import SIDTable
from genrec.training.distill import DistillConfig, FrozenTeacher
from genrec.training.stages import StageContext, build_stage, next_token, stage_config
from genrec.training.tables import load_tables, private_stores
from genrec.training.task import RecommenderTask


def build_datamodule(cfg: DictConfig) -> SequenceDataModule:
    """The data module; the training examples are the stage's (``stage.train_examples``: an alignment stage trains on
    whole training sequences) or else the model's."""
    d = cfg.data
    examples = stage_config(cfg).get("train_examples") or cfg.model.get("train_examples", "sequences")
    return SequenceDataModule(reader=d.reader, preprocess=d.preprocess, max_len=d.max_len,
                              batch_size=d.batch_size, eval_batch_size=d.eval_batch_size,
                              num_workers=d.num_workers, cache_dir=d.cache_dir, seed=cfg.seed,
                              train_examples=examples, bucket_by_length=cfg.model.get("bucket_by_length", False),
                              split=d.get("split"), features=cfg.model.get("features"))


def load_sid_table(cfg: DictConfig, item_raw_ids: np.ndarray) -> SIDTable:
    """The table at ``cfg.sid_table``, checked to hold exactly the dataset's items in its dense order; with cold
    items (``data.split.cold_items``) also checked to have learnt nothing from their interactions
    (:func:`require_split_of_sid_source`)."""
    if not cfg.get("sid_table"):
        raise ConfigError("sid_table", f"model={cfg.model.name} generates semantic IDs; set sid_table=<a folder "
                                       "written by genrec-tokenize for this dataset>")
    table = SIDTable.load(cfg.sid_table)
    table.require_items(item_raw_ids, source=f"sid_table={cfg.sid_table}")
    split = SplitConfig.from_config(cfg.data.get("split"))
    if split.cold_items:
        require_split_of_sid_source(table, split, str(cfg.sid_table))
    return table


def _run_dirs(node) -> list[str]:
    """Every ``run_dir`` value inside an encoder config (collaborative, or the parts of a fused one)."""
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "run_dir" and v] + [d for v in node.values() for d in _run_dirs(v)]
    return []


def require_split_of_sid_source(table: SIDTable, split: SplitConfig, source: str) -> None:
    """A model trained with cold items must not read SIDs fitted on their interactions: every run a table's encoder
    read (a collaborative item table) must have been trained with the same split; a table whose encoder is not
    recorded is refused (content-only encoders, e.g. ``encoder=text``, read no interactions)."""
    encoder = (table.config or {}).get("encoder")
    if not encoder:
        raise ConfigError("sid_table", f"{source} records no encoder; with data.split.cold_items the SID table "
                                       "must be shown to read no interaction of the cold items (make it with "
                                       "genrec-tokenize)")
    for run_dir in _run_dirs(encoder):
        run = RunFolder.existing(run_dir, "sid_table encoder.run_dir")
        theirs = SplitConfig.from_config(run.config().data.get("split"))
        if theirs != split:
            raise ConfigError("sid_table", f"{source} was fitted on the item table of {run_dir}, trained with "
                                           f"data.split {theirs}, not this run's {split}: the cold items' "
                                           "interactions would reach their codes; tokenize with encoder=text or a run "
                                           "of the same split")


def _task_settings(cfg: DictConfig) -> dict:
    return {"lr": cfg.optim.lr, "weight_decay": cfg.optim.weight_decay, "betas": tuple(cfg.optim.betas),
            "warmup_steps": cfg.optim.get("warmup_steps", 0), "schedule": cfg.optim.get("schedule", "constant"),
            "ks": tuple(cfg.eval.ks), "exclude_history": cfg.eval.exclude_history}


def _feature_embedding(cfg: DictConfig, features: EncodedFeatures | None) -> FeatureEmbedding | None:
    """The model's side-feature tables when ``model.features`` turns any on (``features``: the data module's)."""
    if not FeatureConfig.from_config(cfg.model.get("features")).enabled:
        return None
    if features is None:
        raise ValueError(f"model={cfg.model.name} uses side features: build_task needs the data module's features")
    if cfg.get("sharding") and cfg.sharding.get("type"):
        raise ConfigError("model.features", f"sharding={cfg.sharding.type}: side features run unsharded only; "
                                            "train with sharding=none or turn model.features off")
    return FeatureEmbedding(features, cfg.model.dim, cfg.model.embedding.get("init_std", 0.02))


def _retrieval_model(cfg: DictConfig, num_items: int, item_raw_ids: np.ndarray | None,
                     features: EncodedFeatures | None = None) -> SequentialRecommender:
    m = cfg.model
    return SequentialRecommender(instantiate(m.embedding, num_items=num_items), instantiate(m.encoder),
                                 similarity=m.similarity, features=_feature_embedding(cfg, features))


def _generative_model(cfg: DictConfig, num_items: int, item_raw_ids: np.ndarray | None,
                      features: EncodedFeatures | None = None) -> torch.nn.Module:
    m = cfg.model
    if item_raw_ids is None or len(item_raw_ids) != num_items + 1:
        raise ValueError(f"model={m.name}: build_task needs the dataset's {num_items + 1} item_raw_ids")
    if cfg.get("sharding") and cfg.sharding.get("type"):
        raise ConfigError("sharding", f"sharding={cfg.sharding.type}: model={m.name} has no sharded tables (its "
                                      "token tables are small); train it with sharding=none (trainer.devices > 1: "
                                      "Lightning DDP)")
    table = load_sid_table(cfg, item_raw_ids)
    parts = {"sid_table": table, **m.decoding}
    if "backbone" in m:  # decoder-only: sequences of (history + next item) tokens after a start token
        parts["backbone"] = instantiate(m.backbone, max_len=(cfg.data.max_len + 1) * table.num_levels)
    # built by a partial: Hydra would turn the SIDTable dataclass into a config node
    return instantiate(m.generator, _partial_=True)(**parts)


def load_teacher(distill: DistillConfig, item_raw_ids: np.ndarray, max_len: int,
                 split: DictConfig | None = None) -> FrozenTeacher:
    """The retrieval model of the run folder ``stage.teacher`` (its config checked for trusted targets, its
    checkpoint by sha256, its items and its ``data.split`` against the student's: a teacher trained on events the
    student's split holds out would leak them), frozen."""
    run = RunFolder.existing(distill.teacher, "stage.teacher")
    cfg = run.config()
    if cfg.model.get("kind", "retrieval") != "retrieval":
        raise ConfigError("stage.teacher", f"{distill.teacher} trained model={cfg.model.name}; the teacher must be "
                                             "a retrieval model (sasrec, hstu) scoring every item")
    if FeatureConfig.from_config(cfg.model.get("features")).enabled:
        raise ConfigError("stage.teacher", f"{distill.teacher} uses side features (model.features); a teacher "
                                             "reads item IDs only")
    if prior_enabled(cfg):
        raise ConfigError("stage.teacher", f"{distill.teacher} adds the transition prior (model.prior); a teacher "
                                             "scores with its embeddings only")
    if cfg.data.max_len < max_len:
        raise ConfigError("stage.teacher", f"the teacher reads at most {cfg.data.max_len} items, the student's "
                                             f"data.max_len is {max_len}")
    teacher_split, student_split = SplitConfig.from_config(cfg.data.get("split")), SplitConfig.from_config(split)
    if teacher_split != student_split:
        raise ConfigError("stage.teacher", f"{distill.teacher} was trained with data.split {teacher_split}, the "
                                             f"student uses {student_split}: a teacher needs the student's split")
    theirs = load_dataset(cfg.data.reader, cfg.data.preprocess, cfg.data.cache_dir).item_raw_ids
    if len(theirs) != len(item_raw_ids) or any(str(a) != str(b) for a, b in zip(theirs[1:], item_raw_ids[1:])):
        raise DataError(run.config_path, f"the teacher was trained on {cfg.data.name!r} with {len(theirs) - 1} items, "
                                         f"not on the student's {len(item_raw_ids) - 1} items in the same order",
                        key="stage.teacher")
    path = run.checkpoint(distill.checkpoint)
    with torch.random.fork_rng(devices=[]):  # building it draws initial weights: leave the run's random state alone
        task = next_token(_retrieval_model(cfg, len(item_raw_ids) - 1, item_raw_ids), stage_config(cfg),
                          StageContext(cfg, item_raw_ids, _task_settings(cfg)))  # its own teacher is not loaded
    load_weights(path, task)
    return FrozenTeacher(task.model, {"run_dir": str(run.path), "model": cfg.model.name,
                                      "checkpoint": str(path.relative_to(run.path)), "sha256": file_digest(path)})


def init_checkpoint(init_from: str) -> Path:
    """``init_from``: a run folder (its best checkpoint, checked against its metrics.json) or a checkpoint file or
    folder inside a run's ``checkpoints/``; checked to be that run's own and intact, nothing loaded."""
    path = Path(init_from)
    if path.parent.name == CHECKPOINT_DIR and path.name.endswith(".ckpt"):
        RunFolder.existing(path.parent.parent, "init_from").check_checkpoint(path)
        return path
    return RunFolder.existing(path, "init_from").checkpoint("best")


def initialize(task: RecommenderTask, init_from: str) -> dict:
    """Load the weights of ``init_from`` (a stage's start: an SFT run) into ``task``; -> what to record."""
    path = init_checkpoint(init_from)
    load_weights(path, task)
    meta = read_meta(path)
    return {"checkpoint": str(path), "sha256": file_digest(path), "epoch": int(meta["epoch"]),
            "global_step": int(meta["global_step"])}


#: ``model.kind`` -> the builder of its model
MODEL_BUILDERS: dict[str, Callable[..., torch.nn.Module]] = {"retrieval": _retrieval_model,
                                                               "generative": _generative_model}


def prior_enabled(cfg: DictConfig) -> bool:
    """Whether ``cfg.model`` adds the transition prior to its scores (``model.prior.enabled``)."""
    return bool((cfg.model.get("prior") or {}).get("enabled", False))


def _attach_prior(cfg: DictConfig, task: RecommenderTask, data: SequenceData | None) -> None:
    """``model.prior``: the residual transition prior (genrec.models.prior_head) counted on ``data``'s training
    parts, added to the retrieval model."""
    if not isinstance(getattr(task, "loss", None), FullSoftmaxLoss):
        raise ConfigError("model.prior", "the transition prior is added to every item's logit: it needs the full "
                                         "softmax (loss@model.loss=full)")
    if cfg.get("sharding") and cfg.sharding.get("type"):
        raise ConfigError("model.prior", f"sharding={cfg.sharding.type}: the transition prior runs unsharded only")
    if data is None:
        raise ValueError(f"model={cfg.model.name} adds the transition prior: build_task needs the dataset (data=)")
    task.model.prior = TransitionPrior.from_data(data, cfg.model.prior.get("weight", 1.0),
                                                 cfg.model.prior.get("fit", "joint"))


def build_task(cfg: DictConfig, num_items: int, item_raw_ids: np.ndarray | None = None,
               features: EncodedFeatures | None = None, data: SequenceData | None = None) -> RecommenderTask:
    """The LightningModule of ``cfg.model``; generative models need the dataset's ``item_raw_ids`` to check their
    SID table, retrieval models with ``model.features`` on the data module's encoded ``features``, with
    ``model.prior`` the dataset ``data`` (its training parts are counted). With ``compile=true`` the model's
    sequence stacks are compiled (:func:`compile_stacks`)."""
    kind = cfg.model.get("kind", "retrieval")
    if kind not in MODEL_BUILDERS:
        raise ConfigError("model.kind", f"got {kind!r}, expected one of {sorted(MODEL_BUILDERS)}")
    model = MODEL_BUILDERS[kind](cfg, num_items, item_raw_ids, features)
    settings = _task_settings(cfg) | ({"sid_table_folder": str(cfg.sid_table)} if kind == "generative" else {})
    task = build_stage(model, cfg, StageContext(cfg, item_raw_ids, settings, load_teacher))
    if kind == "retrieval" and prior_enabled(cfg):
        _attach_prior(cfg, task, data)
    if cfg.get("compile"):
        compile_stacks(cfg, task.model)
    return task


def compile_stacks(cfg: DictConfig, model: torch.nn.Module) -> None:
    """``torch.compile`` (dynamic shapes: jagged batches vary in length) of the forward of each of the model's
    ``sequence_stacks()``, in place: parameter names, checkpoints and the eager decoders are unchanged. Refused with
    sharded tables and fully sharded training, whose wrappers trace or reshard those modules themselves."""
    if (cfg.get("sharding") or {}).get("type") or (cfg.get("fsdp") or {}).get("enabled"):
        raise ConfigError("compile", "compile=true runs unsharded models only (sharding=none, fsdp=none)")
    for stack in model.sequence_stacks():
        stack.compile(dynamic=True)


def load_run(run_dir: str | Path, checkpoint: str | Path = "best", allowed: tuple[str, ...] = TRUSTED_TARGETS,
             decoding: dict | None = None):
    """A trained run read back from its folder -> (its config, the data module set up, its task with the
    checkpoint's weights, in eval mode). ``checkpoint``: ``best``, ``last`` (checked by :meth:`RunFolder.checkpoint`
    before the data loads) or a path :meth:`RunFolder.checkpoint` already returned; ``allowed``: the ``_target_``
    prefixes the run's config may name; ``decoding``: ``model.decoding`` keys of a generative run to change (e.g.
    ``{"beam": 50}``), checked against the run's own."""
    run = RunFolder.existing(run_dir)
    cfg = run.config(allowed)
    if decoding:
        own = cfg.model.get("decoding") if cfg.model.get("kind") == "generative" else None
        if own is None:
            raise ConfigError("decoding", f"{run_dir} trained model={cfg.model.name}, which does not decode; "
                                          "decoding settings apply to generative runs")
        known = set(own) | set(compose_config("train", [f"model={cfg.model.name}"]).model.get("decoding", {}))
        unknown = sorted(set(decoding) - known)  # a key added since the run trained takes its default there
        if unknown:
            raise ConfigError("decoding", f"unknown key(s) {unknown}; model.decoding has {sorted(known)}")
        cfg.model.decoding = OmegaConf.merge(own, decoding)
    path = checkpoint if isinstance(checkpoint, Path) else run.checkpoint(checkpoint)
    datamodule = build_datamodule(cfg)
    datamodule.setup()
    task = build_task(private_stores(cfg), datamodule.data.num_items, datamodule.data.item_raw_ids,
                      datamodule.features, datamodule.data)
    load_weights(path, task)  # a Lightning file, or a distributed checkpoint folder of any world size
    load_tables(task, path)  # dynamic embedding tables, from the snapshot beside the checkpoint
    return cfg, datamodule, task.eval()
