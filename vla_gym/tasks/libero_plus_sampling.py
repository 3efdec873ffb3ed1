"""Drawing LIBERO-Plus variants for a suite x dimension: only among those buildable here, the others skipped and
counted, with the catalog's task ids (the same variant per id on every machine).

Two draws: :func:`sample`, the seeded spread of ``count`` variants over the base tasks that the OOD report plays,
and :func:`task_pool`, the ids a LIBERO-Plus env's unpinned resets draw from (a pinned ``task_id`` whose assets
are missing is refused there, naming the variant and where to get its files).

    >>> pool("libero_goal", "plus_camera").skipped    # LIBERO's own assets build every camera variant
    ()
"""
from __future__ import annotations

from dataclasses import dataclass

from vla_gym.tasks import libero_plus_assets as assets
from vla_gym.tasks import libero_plus_catalog as catalog


@dataclass(frozen=True)
class Pool:
    """A suite x dimension's task ids split by whether the variant can be built here (both in catalog order)."""

    ids: tuple[int, ...]       # buildable here: what draws take
    skipped: tuple[int, ...]   # assets missing: never drawn, refused when asked for by id


def pool(base_suite: str, perturbation: str) -> Pool:
    """Which of the catalog's variants of ``base_suite`` x ``perturbation`` draws take here, which they skip."""
    folder = assets.plus_asset_folder()
    found = catalog.variants_of(base_suite, perturbation)
    here = [not assets.missing_assets(variant, folder) for variant in found]
    return Pool(tuple(i for i, ok in enumerate(here) if ok), tuple(i for i, ok in enumerate(here) if not ok))


def task_pool(tasks, task_id: int | None = None) -> tuple[int, ...] | None:
    """The task ids a LIBERO-Plus env's unpinned resets draw from, given its tasks (the whole catalog of one suite x
    dimension, :func:`vla_gym.tasks.libero_plus.suite_tasks`): None when every variant is buildable here (the env
    draws over all of them, as any env does), else the buildable ones' ids. Refuses with
    :class:`~vla_gym.tasks.libero_plus_assets.LiberoPlusAssetsError`: no variant buildable here (naming the files
    they need), or a pinned ``task_id`` whose variant is not (naming it, its files and the download)."""
    if not tasks:
        raise ValueError("a LIBERO-Plus suite x dimension without tasks")
    here = tuple(task.index for task in tasks if not task.extra["missing_assets"])
    if not here:
        raise assets.assets_error(tasks[0].suite)
    if task_id is not None and 0 <= task_id < len(tasks):  # out of range: the env's own check says so
        assets.require_available(tasks[task_id])
    return None if len(here) == len(tasks) else here


def sample(base_suite: str, perturbation: str, count: int, seed: int = 0) -> list[int]:
    """``count`` task ids of a suite x dimension, among the variants buildable here, spread over the base tasks:
    each base task's variants (all the catalog's) shuffled by ``seed``, the ones missing here skipped, then taken
    in turn, one base task after another; sorted. The shuffles do not depend on the assets here: a base task's
    queue is the same on every machine, less the variants missing there.

        >>> sample("libero_object", "plus_camera", 3, seed=0) == sample("libero_object", "plus_camera", 3, seed=0)
        True
    """
    import numpy as np

    found = catalog.variants_of(base_suite, perturbation)
    here = set(pool(base_suite, perturbation).ids)
    rng = np.random.default_rng(seed)
    by_base: dict[int, list[int]] = {}
    for task_id, variant in enumerate(found):
        by_base.setdefault(variant["base"], []).append(task_id)
    queues = [[int(i) for i in rng.permutation(ids) if int(i) in here] for _, ids in sorted(by_base.items())]
    chosen: list[int] = []
    while len(chosen) < min(count, len(here)):
        for queue in queues:
            if queue and len(chosen) < count:
                chosen.append(queue.pop(0))
    return sorted(chosen)
