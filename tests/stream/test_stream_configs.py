"""stream.yaml composes with every model and source, every source config instantiates, and an HSTU stream runs."""
from __future__ import annotations

import json

import pytest
from hydra.utils import instantiate

from genrec.conf import CONF_DIR
from genrec.errors import ConfigError
from genrec.stream import cli
from genrec.stream.events import EventSchema
from genrec.stream.files import DirectorySource, write_event_files
from genrec.stream.redis_streams import RedisStreamSource
from genrec.stream.replay import ReplaySource
from tests.stream.helpers import TINY, compose_stream, tiny_events

SOURCES = sorted(p.stem for p in (CONF_DIR / "source").glob("*.yaml"))


@pytest.mark.parametrize("name", SOURCES)
def test_every_source_config_instantiates(name, tmp_path, request):
    overrides = [f"source={name}"]
    if name == "files":
        overrides.append(f"source.path={tmp_path}")
    if name == "redis":
        overrides.append(f"source.url={request.getfixturevalue('redis_server').url}")
    if name == "replay":
        overrides += ["data.reader.num_users=20", "data.reader.num_items=30", "data.reader.num_clusters=3"]
    cfg = compose_stream(overrides)
    source = instantiate(cfg.source, _convert_="all")
    kind = {"files": DirectorySource, "redis": RedisStreamSource, "replay": ReplaySource}[name]
    assert isinstance(source, kind) and source.description["kind"] == name
    source.bind(EventSchema.build(cfg.stream.schema), str(tmp_path))
    source.restore(None)
    records = source.read(5)
    assert len(records) == (5 if name == "replay" else 0)
    source.close()


@pytest.mark.parametrize("model", ["sasrec", "hstu"])
def test_stream_config_composes_with_a_dynamic_table_and_a_sampled_loss(model):
    cfg = compose_stream([f"model={model}", "source.path=x"])
    assert cfg.model.embedding._target_.endswith("DynamicItemEmbedding")
    assert cfg.model.loss._target_.endswith("SampledSoftmaxLoss")
    learner = cli.build_learner(cfg)
    assert type(learner.model.encoder).__name__.lower() == model


def test_an_hstu_stream_runs_and_hot_exports_without_the_time_bias(tmp_path):
    frame = tiny_events(users=60, items=80)
    write_event_files(frame, tmp_path / "events", 400, "parquet")
    overrides = TINY + ["model=hstu", "model.dim=16", "model.encoder.attention_dim=8", "model.encoder.hidden_dim=8",
                        f"source.path={tmp_path / 'events'}", "source.poll_seconds=0.05"]
    metrics = cli.run(compose_stream(overrides), tmp_path / "run")
    assert metrics["counts"]["accepted"] == len(frame) and metrics["prequential"]["all"]["hstu"]["recall@10"] >= 0
    with pytest.raises(ConfigError, match="export.every_events: hot exports write a user tower over item IDs alone, "
                                          "and this HSTU uses the time bias"):
        cli.run(compose_stream(overrides + ["export.every_events=100"]), tmp_path / "run2")
    # without the time bias the tower needs item IDs alone: hot exports are written and match the live model
    cli.run(compose_stream(overrides + ["export.every_events=100", "model.encoder.time_bias=false"]), tmp_path / "run3")
    manifests = sorted((tmp_path / "run3" / "exports").glob("v*/manifest.json"))
    assert manifests
    for manifest in manifests:
        parity = json.loads(manifest.read_text())["artifacts"]["user_tower"]["parity"]
        assert parity["passed"] and parity["users"] > 0
