"""The statistics of success rates: Wilson intervals, the exact McNemar test and a paired bootstrap.

    wilson_interval(7, 20)                         # 95 % Wilson score interval of 7 successes in 20 episodes
    mean_rate_interval([(0.5, 20), (0.25, 20)])    # the same, for a mean of success rates (OOD category means)
    rate_with_interval(7, 20)                      # "35.0 % [18.1, 56.7]": a table's cell
    mcnemar_exact_p(a_only=2, b_only=9)            # two checkpoints on the same episodes: is the difference real?
    paired_bootstrap_interval(a, b, strata=tasks)  # 95 % interval of success(B) - success(A) on paired episodes

A success rate measured on n episodes is a binomial proportion; the Wilson score interval keeps its coverage near the
nominal 95 % for small n and for rates near 0 or 1, where the textbook ``p ± 1.96·sqrt(p(1-p)/n)`` collapses to a
point (0/10 would give [0, 0]):

    >>> [tuple(round(x, 4) for x in wilson_interval(k, 10)) for k in (0, 5, 10)]
    [(0.0, 0.2775), (0.2366, 0.7634), (0.7225, 1.0)]

Two reports that played the same episodes are compared episode by episode. Only the discordant pairs (solved by one
checkpoint and not the other) carry information on which is better; McNemar's exact test is the two-sided binomial
test that they split 50/50:

    >>> mcnemar_exact_p(1, 9)          # 2 * P(X <= 1), X ~ Binomial(10, 1/2) = 2 * 11 / 1024
    0.021484375
    >>> mcnemar_exact_p(3, 3), mcnemar_exact_p(0, 0)
    (1.0, 1.0)

Pure Python (``math.comb``) except the bootstrap, which draws with numpy from a fixed seed, so a report's numbers are
repeatable.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import numpy as np

#: the confidence level of every interval the reports show
CONFIDENCE = 0.95


def z_value(confidence: float = CONFIDENCE) -> float:
    """The two-sided standard normal quantile of ``confidence``.

    >>> round(z_value(0.95), 4)
    1.96
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    return statistics.NormalDist().inv_cdf(0.5 + confidence / 2.0)


def wilson_interval(successes: float, n: float, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The Wilson score interval ``(low, high)`` of ``successes`` in ``n`` trials.

    ``successes`` and ``n`` may be fractional (an effective sample size: :func:`mean_rate_interval`).

    >>> low, high = wilson_interval(7, 20)
    >>> round(low, 3), round(high, 3)
    (0.181, 0.567)
    """
    if not n > 0:
        raise ValueError(f"a success rate needs at least one episode, got n={n}")
    if not 0 <= successes <= n:
        raise ValueError(f"successes={successes} must lie in [0, n={n}]")
    z = z_value(confidence)
    p, z2 = successes / n, z * z
    denominator = 1.0 + z2 / n
    center = (p + z2 / (2.0 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n))
    low = 0.0 if successes == 0 else max(0.0, center - half)
    high = 1.0 if successes == n else min(1.0, center + half)
    return low, high


def mean_rate_interval(parts: Sequence[tuple[float, float]], weights: Sequence[float] | None = None,
                       confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """Wilson interval of a weighted mean of success rates; ``parts`` are ``(rate, episodes)``, ``weights`` their
    weights (default equal). None when no part has episodes and a rate.

    The mean ``m = sum w_i p_i`` (weights normalised to sum 1) is treated as one proportion measured on Kish's
    effective number of episodes ``n_eff = 1 / sum(w_i**2 / n_i)``: its interval is ``wilson_interval(m * n_eff,
    n_eff)``. Parts with equal episodes and weights give the Wilson interval of the pooled episodes. Parts whose
    rate is NaN (no success reported) are left out, as the category means leave them out.

    >>> [round(x, 6) for x in mean_rate_interval([(0.5, 10), (0.5, 10)])] == [round(x, 6) for x in wilson_interval(10, 20)]
    True
    >>> [round(x, 3) for x in mean_rate_interval([(1.0, 4), (0.0, 4)], weights=[3, 1])]   # m = 0.75, n_eff = 6.4
    [0.375, 0.938]
    """
    weights = [1.0] * len(parts) if weights is None else list(weights)
    if len(weights) != len(parts):
        raise ValueError(f"{len(weights)} weights for {len(parts)} parts")
    kept = [(float(rate), float(n), float(w)) for (rate, n), w in zip(parts, weights)
            if n and n > 0 and w > 0 and not math.isnan(rate)]
    if not kept:
        return None
    total = sum(w for _, _, w in kept)
    mean = sum(w * rate for rate, _, w in kept) / total
    n_eff = 1.0 / sum((w / total) ** 2 / n for _, n, w in kept)
    return wilson_interval(min(max(mean, 0.0), 1.0) * n_eff, n_eff, confidence)


def discordant_pairs(a: Sequence[bool], b: Sequence[bool]) -> tuple[int, int]:
    """``(a_only, b_only)``: the paired episodes only A solved and those only B solved.

    >>> discordant_pairs([1, 1, 0, 0], [1, 0, 1, 1])
    (1, 2)
    """
    if len(a) != len(b):
        raise ValueError(f"paired outcomes have equal lengths, got {len(a)} and {len(b)}")
    a_only = sum(bool(x) and not bool(y) for x, y in zip(a, b))
    b_only = sum(bool(y) and not bool(x) for x, y in zip(a, b))
    return a_only, b_only


def mcnemar_exact_p(a_only: int, b_only: int) -> float:
    """Exact two-sided McNemar p-value of ``a_only`` vs ``b_only`` discordant pairs: ``2 * P(X <= min)`` for
    ``X ~ Binomial(a_only + b_only, 1/2)``, capped at 1 (1.0 without discordant pairs).

    >>> round(mcnemar_exact_p(10, 2), 5)       # 2 * (1 + 12 + 66) / 4096
    0.03857
    """
    if a_only < 0 or b_only < 0:
        raise ValueError(f"discordant counts are >= 0, got {a_only} and {b_only}")
    n = int(a_only) + int(b_only)
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(a_only, b_only) + 1))
    return min(1.0, 2 * tail / 2**n)  # exact integers: no underflow for large n


def mcnemar_outcomes_p(a: str, b: str) -> float:
    """Exact McNemar p of two paired outcome strings ("0"/"1" per episode, in the same episode order), as the
    results JSONs store them (``outcomes: {"sft": ..., "rl": ...}``).

    >>> mcnemar_outcomes_p("0011", "1111")
    0.5
    """
    return mcnemar_exact_p(*discordant_pairs([c == "1" for c in a], [c == "1" for c in b]))


def rank_auc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """Area under the ROC curve of ``scores`` for ``labels`` (Mann-Whitney: the chance a random positive scores above a
    random negative, ties counting half); None without both classes. 0.5: the scores do not tell them apart.

    >>> rank_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1])
    0.75
    """
    positives = [s for s, y in zip(scores, labels) if y]
    negatives = [s for s, y in zip(scores, labels) if not y]
    if not positives or not negatives:
        return None
    order = sorted((s, i) for i, s in enumerate(scores))
    ranks = [0.0] * len(order)
    start = 0
    while start < len(order):  # average ranks over ties
        end = start
        while end + 1 < len(order) and order[end + 1][0] == order[start][0]:
            end += 1
        for k in range(start, end + 1):
            ranks[order[k][1]] = (start + end) / 2 + 1
        start = end + 1
    rank_sum = sum(r for r, y in zip(ranks, labels) if y)
    n_pos, n_neg = len(positives), len(negatives)
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def paired_bootstrap_interval(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE,
                              resamples: int = 10_000, seed: int = 0,
                              strata: Sequence | None = None) -> tuple[float, float]:
    """Percentile bootstrap interval of ``mean(b) - mean(a)`` over paired outcomes (episode ``i`` is ``a[i]``,
    ``b[i]``): pairs are drawn with replacement, ``resamples`` times from ``numpy.random.default_rng(seed)``.

    ``strata`` (one label per pair, e.g. the task) draws within each stratum, keeping its number of pairs, as the
    evaluation fixed the episodes per task. Drawing ``n`` pairs with replacement is a multinomial draw over the
    distinct differences ``b[i] - a[i]`` (-1, 0, 1 for successes), which is how it is computed.

    >>> paired_bootstrap_interval([0, 0, 1, 1], [0, 0, 1, 1])
    (0.0, 0.0)
    >>> low, high = paired_bootstrap_interval([0] * 10 + [1] * 10, [1] * 8 + [0] * 2 + [1] * 10)
    >>> low < 0.4 < high <= 0.8
    True
    """
    a_values, b_values = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a_values.shape != b_values.shape or a_values.ndim != 1 or not len(a_values):
        raise ValueError(f"paired outcomes need equal, non-zero lengths, got {a_values.shape} and {b_values.shape}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    z_value(confidence)  # checks the level
    differences = b_values - a_values
    labels = np.zeros(len(differences), dtype=int) if strata is None else np.unique(
        np.asarray([str(s) for s in strata]), return_inverse=True)[1]
    if len(labels) != len(differences):
        raise ValueError(f"{len(labels)} strata for {len(differences)} pairs")
    rng = np.random.default_rng(seed)
    sums = np.zeros(resamples)
    for stratum in np.unique(labels):
        values, counts = np.unique(differences[labels == stratum], return_counts=True)
        draws = rng.multinomial(int(counts.sum()), counts / counts.sum(), size=resamples)
        sums += draws @ values
    means = sums / len(differences)
    alpha = 1.0 - confidence
    low, high = np.quantile(means, [alpha / 2.0, 1.0 - alpha / 2.0])
    return float(low), float(high)


def success_counts(stats: dict) -> tuple[float, float] | None:
    """``(successes, episodes that reported success)`` of a report's summary entry (``summary["overall"]``, a task,
    an OOD row); reports written before the counts were stored give ``round(rate * episodes)``. None: no success.

    >>> success_counts({"episodes": 10, "success_rate": 0.3}), success_counts({"episodes": 3, "success_rate": float("nan")})
    ((3, 10), None)
    """
    rate, episodes = stats.get("success_rate"), stats.get("episodes") or 0
    if rate is None or math.isnan(rate) or not episodes:
        return None
    n = stats.get("success_episodes") or episodes
    successes = stats.get("successes")
    return (round(rate * n) if successes is None else successes), n


def interval_text(interval: Sequence[float] | None, percent: bool = False) -> str:
    """``[0.237, 0.763]`` (``percent``: ``[23.7, 76.3]``), ``n/a`` for None.

    >>> interval_text((0.2366, 0.7634)), interval_text((0.2366, 0.7634), percent=True), interval_text(None)
    ('[0.237, 0.763]', '[23.7, 76.3]', 'n/a')
    """
    if interval is None:
        return "n/a"
    low, high = interval
    return f"[{100 * low:.1f}, {100 * high:.1f}]" if percent else f"[{low:.3f}, {high:.3f}]"


def rate_with_interval(successes: float, episodes: float) -> str:
    """``35.0 % [18.1, 56.7]``: the success rate of ``successes`` in ``episodes`` and its 95 % Wilson interval, in
    percent, as the tables show it (``n/a`` without episodes).

    >>> rate_with_interval(7, 20), rate_with_interval(50, 50), rate_with_interval(0, 0)
    ('35.0 % [18.1, 56.7]', '100.0 % [92.9, 100.0]', 'n/a')
    """
    if not episodes:
        return "n/a"
    return f"{100 * successes / episodes:.1f} % {interval_text(wilson_interval(successes, episodes), percent=True)}"


__all__ = ["CONFIDENCE", "discordant_pairs", "interval_text", "mcnemar_exact_p", "mean_rate_interval",
           "paired_bootstrap_interval", "rate_with_interval", "success_counts", "wilson_interval", "z_value"]
