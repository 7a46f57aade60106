"""Every config in conf/ composes and instantiates."""
import inspect
import pytest
from hydra.utils import get_method, instantiate
from omegaconf import OmegaConf

from genrec.data.datamodule import read_log
from genrec.errors import DataError
from genrec.dist import ShardingConfig, TorchRecStrategy, build_plan
from genrec.models.recommender import SequentialRecommender
from genrec.tokenize.cli import build
from genrec.conf import CONF_DIR, compose_config
from genrec.training.builders import build_task
from genrec.training.resume import LastCheckpoint, ResumeState, RunCheckpoint
from genrec.training.fit import build_trainer, trainer_arguments
from tests.shared import SHARED


#: presets whose files the user downloads (../shared/data has no ratings for them)
USER_SUPPLIED = {"ml1m", "ml20m"}


def _options(group: str) -> list[str]:
    """The selectable options of a group (files starting with ``_`` are partials other options include)."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml") if not p.stem.startswith("_"))


def _compose(overrides: list[str], config: str = "train"):
    return compose_config(config, overrides=overrides)


def test_every_group_has_options():
    for group in ("data", "model", "loss", "trainer", "experiment", "index", "tokenizer", "encoder", "sharding",
                  "backbone", "callbacks", "logger"):
        assert _options(group), group


def _toy_sid_table(folder):
    """A SID table for 20 items with raw IDs item1..item20 -> (folder, raw IDs)."""
    import numpy as np

    from genrec.tokenize.sid_table import SIDTable

    raw = np.array([None] + [f"item{i}" for i in range(1, 21)], dtype=object)
    codes = np.array([[-1, -1]] + [[i // 5, i % 5] for i in range(20)])
    SIDTable(codes, (4, 5), raw).save(folder)
    return folder, raw


@pytest.mark.parametrize("name", _options("model"))
def test_model_configs_instantiate(name, tmp_path):
    cfg = _compose([f"model={name}"])
    m = cfg.model
    if m.get("kind") == "generative":
        folder, raw = _toy_sid_table(tmp_path)
        task = build_task(_compose([f"model={name}", f"sid_table={folder}"]), 20, raw)
        assert task.model.num_items == 20 and task.model.sids.num_levels == 2
        return
    model = SequentialRecommender(instantiate(m.embedding, num_items=20), instantiate(m.encoder), m.similarity)
    assert model.num_items == 20
    instantiate(m.loss)


@pytest.mark.parametrize("name", _options("backbone"))
def test_backbone_configs_build_a_generator(name, tmp_path):
    folder, raw = _toy_sid_table(tmp_path)
    task = build_task(_compose(["model=sid_gpt", f"backbone@model.backbone={name}", f"sid_table={folder}",
                                "model.dim=16"]), 20, raw)
    assert task.model.backbone.dim == 16


def test_generative_models_need_a_matching_sid_table(tmp_path):
    folder, raw = _toy_sid_table(tmp_path)
    with pytest.raises(ValueError, match="sid_table: model=tiger generates semantic IDs"):
        build_task(_compose(["model=tiger"]), 20, raw)
    other = raw.copy()
    other[3] = "another"
    with pytest.raises(DataError, match="first difference at dense ID 3"):
        build_task(_compose(["model=tiger", f"sid_table={folder}"]), 20, other)
    with pytest.raises(ValueError, match="sharding=row_wise: model=sid_gpt has no sharded tables"):
        build_task(_compose(["model=sid_gpt", f"sid_table={folder}", "sharding=row_wise"]), 20, raw)


@pytest.mark.parametrize("name", _options("loss"))
@pytest.mark.parametrize("model", ["sasrec", "hstu"])
def test_loss_configs_instantiate_in_every_model(name, model):
    cfg = _compose([f"model={model}", f"loss@model.loss={name}"])
    loss = instantiate(cfg.model.loss)
    assert type(loss).__name__ == ("FullSoftmaxLoss" if name == "full" else "SampledSoftmaxLoss")


@pytest.mark.parametrize("name", _options("data"))
def test_data_configs_instantiate(name):
    cfg = _compose([f"data={name}"])
    reader = OmegaConf.to_container(cfg.data.reader, resolve=False)
    fn = get_method(reader.pop("_target_"))
    missing = [k for k, v in reader.items() if v == "???"]
    # the reader accepts every key of its config
    inspect.signature(fn).bind(**{k: None for k in reader})
    if missing:  # a template the user fills in (path: ???)
        return
    resolved = OmegaConf.to_container(cfg.data.reader, resolve=True)
    paths = [v for k, v in resolved.items() if "path" in k and v]
    if paths and not SHARED.exists():
        pytest.skip(f"real datasets not found at {SHARED}")
    if name in USER_SUPPLIED:  # the GroupLens files are not in ../shared/data: a clear error, not a crash
        with pytest.raises(DataError, match="ratings|not found"):
            read_log(cfg.data.reader)
        return
    log = read_log(cfg.data.reader)
    assert len(log.events) > 0


@pytest.mark.parametrize("name", _options("experiment"))
def test_experiment_configs_compose(name):
    cfg = _compose([f"experiment={name}"])
    assert cfg.data.name and cfg.model.name
    assert OmegaConf.to_container(cfg, resolve=True)


@pytest.mark.parametrize("name", _options("trainer"))
def test_trainer_configs_build_a_trainer(name, tmp_path):
    cfg = _compose([f"trainer={name}"])
    if cfg.trainer.get("accelerator") == "gpu":
        pytest.skip("GPU trainer config")
    trainer, best = build_trainer(cfg, tmp_path)
    assert trainer.max_epochs == cfg.trainer.max_epochs and trainer.gradient_clip_val == cfg.trainer.gradient_clip_val
    assert best.monitor == f"val/{cfg.eval.monitor}" and best.dirpath == str(tmp_path / "checkpoints")
    kinds = [type(c) for c in trainer.callbacks]
    assert {ResumeState, RunCheckpoint, LastCheckpoint} <= set(kinds)
    assert kinds.index(LastCheckpoint) > kinds.index(RunCheckpoint)  # last.ckpt holds the updated best score


@pytest.mark.parametrize("name", _options("callbacks"))
def test_callback_configs_build_their_callbacks(name, tmp_path):
    cfg = _compose([f"callbacks={name}"])
    trainer, _ = build_trainer(cfg, tmp_path)
    built = {type(c).__name__: c for c in trainer.callbacks}
    for key, node in cfg.callbacks.items():
        callback = built[node._target_.rsplit(".", 1)[1]]
        if key == "early_stopping":
            assert callback.patience == node.patience and callback.monitor == f"val/{cfg.eval.monitor}"


#: loggers whose package is an extra (genrec[trackers])
TRACKER_PACKAGES = {"mlflow": "mlflow", "wandb": "wandb"}


@pytest.mark.parametrize("name", _options("logger"))
def test_logger_configs_log_into_the_run_folder(name, tmp_path, monkeypatch):
    """Every logger writes into the run folder; MLflow into its tracking store (MLFLOW_TRACKING_URI)."""
    from lightning.pytorch.loggers import MLFlowLogger

    if name in TRACKER_PACKAGES:
        pytest.importorskip(TRACKER_PACKAGES[name], reason=f"{TRACKER_PACKAGES[name]} is not installed "
                                                           "(pip install -e .[trackers])")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    cfg = _compose([f"logger={name}"])
    trainer, _ = build_trainer(cfg, tmp_path / "run")
    assert len(trainer.loggers) == len(cfg.logger) >= 1
    for logger in trainer.loggers:
        if isinstance(logger, MLFlowLogger):
            assert (tmp_path / "mlflow.db").is_file()
        else:
            assert logger.save_dir == str(tmp_path / "run")


def test_bad_trainer_values_name_the_key(tmp_path):
    from genrec.errors import ConfigError
    from genrec.training.fit import check_train_config

    for override, message in [("trainer.max_epochs=abc", "trainer.max_epochs: got 'abc', expected an integer"),
                              ("+trainer.max_epoch=3", "trainer.max_epoch: not an argument of lightning.Trainer"),
                              ("trainer.precision=[1]", "trainer.precision: got [1]"),
                              ("data.batch_size=0", "data.batch_size: got 0, expected a positive value"),
                              ("optim.lr=fast", "optim.lr: got 'fast', expected a number"),
                              ("seed=1.5", "seed: got 1.5, expected an integer")]:
        with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
            check_train_config(_compose([override]))
    check_train_config(_compose(["+trainer.max_time=00:00:10:00", "trainer.precision=bf16-mixed"]))


@pytest.mark.parametrize("name", _options("sharding"))
def test_sharding_configs_build_a_plan(name):
    cfg = _compose([f"sharding={name}", "model.dim=16"])
    sharding = ShardingConfig.from_config(cfg.sharding)
    if name == "none":
        assert not sharding.enabled and trainer_arguments(cfg)["strategy"] == "auto"
        return
    assert isinstance(trainer_arguments(cfg)["strategy"], TorchRecStrategy)
    m = cfg.model
    model = SequentialRecommender(instantiate(m.embedding, num_items=20), instantiate(m.encoder), m.similarity)
    plan = build_plan(model, sharding, sharding.sharder("cpu"), 2, 2, "cpu")
    (table,) = plan.plan["item_embedding.tables.collection"].values()
    assert table.compute_kernel == "fused" and (name == "planner" or table.sharding_type == name)


def test_sharding_with_another_strategy_is_an_error():
    with pytest.raises(ValueError, match="trainer.strategy: sharding=row_wise trains with genrec's TorchRecStrategy"):
        trainer_arguments(_compose(["sharding=row_wise", "trainer.strategy=ddp"]))


def test_eval_config_composes():
    cfg = compose_config("eval", overrides=["run_dir=/tmp/x"])
    assert cfg.checkpoint == "best"


@pytest.mark.parametrize("name", _options("index"))
def test_index_configs_build_an_index(name):
    import numpy as np

    from genrec.export.index import build_index

    cfg = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "index" / f"{name}.yaml"))
    vectors = np.random.default_rng(0).normal(size=(300, 16)).astype(np.float32)
    index, info = build_index(vectors, np.arange(1, 301), cfg)
    assert index.ntotal == 300 and info["type"] == cfg["type"]


def test_export_config_composes_with_every_index():
    cfg = compose_config("export", overrides=["run_dir=/tmp/x"])
    assert set(cfg.indexes) == set(_options("index")) and cfg.default_index in cfg.indexes
@pytest.mark.parametrize("name", _options("tokenizer"))
def test_tokenizer_configs_instantiate(name):
    cfg = _compose([f"tokenizer={name}"], "tokenize")
    quantizer = build(cfg.tokenizer)
    assert (quantizer.num_levels, quantizer.codebook_size) == (cfg.tokenizer.num_levels, cfg.tokenizer.codebook_size)
    assert cfg.tokenizer.name == name


@pytest.mark.parametrize("name", _options("encoder"))
def test_encoder_configs_instantiate(name):
    cfg = _compose([f"encoder={name}"], "tokenize")
    for key in OmegaConf.missing_keys(cfg):  # a path the user fills in (run_dir: ???)
        OmegaConf.update(cfg, key, "placeholder")
    assert callable(build(cfg.encoder).encode)
    assert cfg.encoder.name == name
