"""The one wrapper-spec parser (vla_gym/vector/wrapper_spec.py): accepted forms and the errors for bad entries.

Fast: no simulator is started (make_vec refuses a bad spec before it builds any env).
"""
from __future__ import annotations

import functools

import pytest

from vla_gym.trainers.runtime.config import ConfigError, config_from_dict, load_config
from vla_gym.vector.wrapper_spec import (
    ACCEPTED_FORMS,
    WrapperSpecError,
    check_wrapper_specs,
    parse_wrapper,
    parse_wrappers,
)
from vla_gym.wrappers import ActionChunk, EpisodeMetrics, MultiCamera


def test_accepted_forms():
    chunk, metrics, camera, plain = parse_wrappers([
        {"name": "ActionChunk", "kwargs": {"chunk_size": 4}}, "EpisodeMetrics",
        "vla_gym.wrappers:MultiCamera", {"name": "EpisodeMetrics"},
    ])
    assert isinstance(chunk, functools.partial) and chunk.func is ActionChunk and chunk.keywords == {"chunk_size": 4}
    assert metrics is EpisodeMetrics and camera is MultiCamera and plain is EpisodeMetrics
    callable_spec = functools.partial(MultiCamera, size=32)
    assert parse_wrapper(callable_spec) is callable_spec  # from Python, a callable passes through
    assert parse_wrappers(()) == ()


@pytest.mark.parametrize("spec, words", [
    ({"name": "ActionChunk", "chunk_size": 8}, ["env.wrappers[0]", "unknown key(s) chunk_size",
                                                "{name: ActionChunk, kwargs: {chunk_size: 8}}"]),
    ("ActionChunks", ["env.wrappers[0]", "unknown wrapper 'ActionChunks'", "did you mean ActionChunk",
                      "EpisodeMetrics, MultiCamera, NormalizeRewardPerTask, Perturb, RecordEpisodeVideo, RecordEpisodes, SB3Compat"]),
    ("finished_episodes", ["unknown wrapper 'finished_episodes'"]),  # a helper of vla_gym.wrappers, not a wrapper
    ("ActionChunk", ["env.wrappers[0]: ActionChunk needs chunk_size", "kwargs: {chunk_size: ...}"]),
    ({"name": "ActionChunk", "kwargs": {"chunk_sise": 8}}, ["env.wrappers[0].kwargs", "no argument 'chunk_sise'",
                                                            "did you mean 'chunk_size'"]),
    ({"name": "EpisodeMetrics", "kwargs": {"env_index": 1}}, ["env_index is passed by the vector env"]),
    ({"name": "ActionChunk", "kwargs": [8]}, ["env.wrappers[0].kwargs: expected a mapping"]),
    ({"kwargs": {"chunk_size": 8}}, ["needs 'name'"]),
    ({"name": 3}, ["env.wrappers[0].name: expected a wrapper name"]),
    ("no_such_module:Wrapper", ["cannot import module 'no_such_module'"]),
    ("vla_gym.wrappers:Nope", ["has no callable 'Nope'"]),
    (42, ["42 is not a wrapper spec", ACCEPTED_FORMS]),
])
def test_bad_entries_name_the_key_and_the_fix(spec, words):
    with pytest.raises(WrapperSpecError) as error:
        check_wrapper_specs([spec], key="env.wrappers")
    for word in words:
        assert word in str(error.value)


def test_a_bad_list_is_refused():
    with pytest.raises(WrapperSpecError, match="expected a list of wrapper specs"):
        parse_wrappers("EpisodeMetrics", key="env.wrappers")


def test_config_load_fails_on_a_bad_wrapper_before_any_env(tmp_path):
    with pytest.raises(ConfigError, match=r"env\.wrappers\[1\]: unknown wrapper 'EpisodeMetric' \(did you mean"):
        config_from_dict({"env": {"id": "VLA/ManiSkill-PushCube-v0", "wrappers": ["MultiCamera", "EpisodeMetric"]}})
    path = tmp_path / "old.yaml"
    path.write_text("env:\n  id: VLA/Libero10-v0\n  wrappers: [{name: ActionChunk, chunk_size: 8}]\n")
    with pytest.raises(ConfigError, match="put them under kwargs"):
        load_config(path)
    with pytest.raises(ConfigError, match=r"env\.wrappers\[0\]\.kwargs: ActionChunk takes no argument 'size'"):
        load_config(path, ["env.wrappers=[{name: ActionChunk, kwargs: {size: 8}}]"])


def test_make_vec_uses_the_same_parser():
    import vla_gym

    with pytest.raises(WrapperSpecError, match=r"wrappers\[0\]: unknown key\(s\) chunk_size"):
        vla_gym.make_vec("VLA/ManiSkill-PushCube-v0", 2, vectorization="sync",
                         wrappers=[{"name": "ActionChunk", "chunk_size": 8}])
