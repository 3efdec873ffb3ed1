"""How widely an action-token policy samples: per token, its entropy, how much probability its k likeliest bins hold,
and how far a sample lands from the mode (in bins), on the frames of a demo dataset, at each temperature.

    python experiments/libero_miniature/token_spread.py \
        --checkpoint experiments/libero_miniature/models/libero_object_seed0_sft_protocol_tokens.pt \
        --dataset runs/libero_rl_campaign/object_s1_tokens/demos --frames 96 \
        --out experiments/libero_miniature/results_token_spread.json    # the README's figures

At temperature 1.6 the study's token SFT draws a token more than 10 bins from its mode nearly one time in four.
Bins are OpenVLA's 256 over the action range, so 10 bins are 8 % of it (the Gaussian head's exploration std 0.05
moves a dimension 5 bins on average).

    >>> spread(torch.tensor([[[0.0, 0.0, -100.0, -100.0]]]).log_softmax(-1), tops=(1, 2))["top_mass"]
    {1: 0.5, 2: 1.0}
"""
from __future__ import annotations

import json
import sys

import torch

from vla_gym.runtime.cli_args import script_parser
from vla_gym.trainers.runtime.results import git_commit, repo_relative, write_results


def spread(log_probs: torch.Tensor, tops: tuple[int, ...] = (1, 5, 10, 20)) -> dict:
    """Means over tokens of log-probabilities ``[..., n_bins]``: entropy (nats), the mass of the ``tops`` likeliest
    bins, the expected distance of a sample from the mode (bins) and the chance it lands over 10 bins away."""
    probs = log_probs.exp()
    ranked = probs.sort(-1, descending=True).values.cumsum(-1)
    distance = (torch.arange(log_probs.shape[-1]) - log_probs.argmax(-1, keepdim=True)).abs().float()
    return {"entropy": round(float(-(probs * log_probs).sum(-1).mean()), 3),
            "top_mass": {k: round(float(ranked[..., k - 1].mean()), 3) for k in tops},
            "mean_bins_from_mode": round(float((probs * distance).sum(-1).mean()), 2),
            "over_10_bins": round(float((probs * (distance > 10)).sum(-1).mean()), 3)}


def main(argv: list[str] | None = None) -> int:
    from vla_gym.trainers.policies.token_entropy import checkpoint_logits

    parser = script_parser(__doc__)
    parser.add_argument("--checkpoint", required=True, help="a model with the token head (policy.kwargs.head=tokens)")
    parser.add_argument("--dataset", required=True, help="a LeRobot dataset whose frames the policy reads")
    parser.add_argument("--frames", type=int, default=96)
    parser.add_argument("--temperatures", type=float, nargs="+", default=[1.0, 1.6])
    parser.add_argument("--json", action="store_true", help="print one JSON line per temperature")
    parser.add_argument("--out", help="write the rows with what was measured to this JSON file")
    args = parser.parse_args(argv)
    try:
        logits = checkpoint_logits(args.checkpoint, args.dataset, args.frames)
    except ValueError as exc:  # no token head
        parser.error(f"{args.checkpoint}: {exc}")
    rows = []
    for temperature in args.temperatures:
        row = {"temperature": temperature, **spread((logits / temperature).log_softmax(-1))}
        rows.append(row)
        print(json.dumps(row) if args.json else
              f"temperature {temperature}: entropy {row['entropy']:.2f} nats per token; mass of the likeliest "
              + ", ".join(f"{k}: {v:.0%}" for k, v in row["top_mass"].items())
              + f"; a sample {row['mean_bins_from_mode']:.1f} bins from the mode on average, "
              f"over 10 bins away {row['over_10_bins']:.0%}")
    if args.out:
        write_results(args.out, {"checkpoint": repo_relative(args.checkpoint), "dataset": args.dataset,
                                 "frames": int(logits.shape[0]), "rows": rows, "commit": git_commit()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
