"""Is a Hugging Face model there to load? One fast check before ``from_pretrained`` (which, for a model that is
neither on disk nor reachable, retries the hub for about a minute and ends in a transformers traceback).

    >>> require_pretrained("/path/to/pi0")                                                  # doctest: +SKIP
    PretrainedModelError: policy.kwargs.model=/path/to/pi0 is the example config's placeholder ...

A model is there when it is a local directory with a ``config.json`` (what ``save_pretrained`` writes), or a hub
name whose ``config.json`` is in the Hugging Face cache. A hub name that is not cached is downloaded by
``from_pretrained`` when the hub answers; when it does not (no network, ``HF_HUB_OFFLINE=1``), or when the name is
neither a directory nor a hub name (a placeholder such as ``/path/to/pi0``), :class:`PretrainedModelError` says so
in one line that names the setting and the fix.
"""
from __future__ import annotations

import os
import pathlib

#: seconds the hub gets to answer whether a model that is not cached exists
HUB_TIMEOUT_S = 5.0
_TRUE = ("1", "on", "yes", "true")


class PretrainedModelError(OSError):
    """The model is not on this machine and cannot be downloaded; the message names the setting and the fix."""


def hub_offline() -> bool:
    """Whether the Hugging Face libraries are told not to use the network (``HF_HUB_OFFLINE``, ``TRANSFORMERS_OFFLINE``)."""
    return any(os.environ.get(name, "").strip().lower() in _TRUE for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _is_hub_name(name: str) -> bool:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def _cached(name: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(name, "config.json"), str)


def require_pretrained(model: str | os.PathLike, setting: str = "policy.kwargs.model") -> str:
    """``model`` as a string when ``from_pretrained`` can load it here, else :class:`PretrainedModelError` (module
    docstring); ``setting`` is the config key that names the model."""
    name = str(model)
    given = f"{setting}={name}"
    fix = f"pass a local directory (what save_pretrained wrote), {setting}=/path/to/model"
    path = pathlib.Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise PretrainedModelError(f"{given} is a directory without config.json, not a saved model: {fix}")
        return name
    if not _is_hub_name(name):
        what = ("is the example config's placeholder, not a directory on this machine" if "/path/to/" in name
                else "is neither a directory on this machine nor a Hugging Face hub name")
        raise PretrainedModelError(f"{given} {what}: {fix}")
    if _cached(name):
        return name
    if hub_offline():
        raise PretrainedModelError(f"{given} is not on this machine and the hub is off (HF_HUB_OFFLINE / "
                                   f"TRANSFORMERS_OFFLINE is set): {fix}, or download it where the hub is reachable")
    reason = _hub_answer(name)
    if reason:
        raise PretrainedModelError(f"{given} is not on this machine and {reason}: {fix}")
    return name


def _hub_answer(name: str) -> str | None:
    """None when the hub has ``name`` (from_pretrained downloads it), else why it cannot be downloaded."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    try:
        HfApi().model_info(name, timeout=HUB_TIMEOUT_S)  # HfApi() reads the endpoint (HF_ENDPOINT) now
    except GatedRepoError:
        return "it is gated on the hub (accept its license on huggingface.co, then `hf auth login`)"
    except RepositoryNotFoundError:
        return "the hub has no model of that name (or it is private: `hf auth login`)"
    except Exception:  # no network, DNS, proxy, timeout, TLS: the hub cannot be reached
        return "the hub cannot be reached"
    return None
