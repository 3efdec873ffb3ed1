"""What a residual RL run's critic offers its actor: ``ResidualTD3.action_gains`` on batches of the run's replay.

    python experiments/libero_miniature/residual_critic_probe.py --run runs/libero_residual/residual \
        --out runs/critic_probe.json

``--run`` is a residual run's folder while it still holds its critics and replay (``final.pt`` and ``replay.pt``; the
campaign slims both away once the run is finished). Prints and writes, averaged over ``--batches`` replay batches: the
relative Q gain of the actor's residual (``actor_q_gain``), of the best residual within the bound
(``best_gain``, in units of ``mean|Q|`` as in the actor's loss) and that residual's size in units of the bound,
beside the run's ``residual_l2``: a best gain far below ``residual_l2`` means the penalty keeps the residual at the
base because the critic has not learnt which actions succeed (experiments/libero_miniature/README.md).
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
import sys

import torch

from vla_gym.runtime.cli_args import script_parser
from vla_gym.trainers.algorithms.replay import FeatureReplay
from vla_gym.trainers.algorithms.residual_td3 import ResidualTD3, TD3Settings
from vla_gym.trainers.runtime.checkpoint import atomic_write_text, load_checkpoint, load_policy


def probe(run: pathlib.Path, batches: int = 8, batch_size: int = 256, seed: int = 0) -> dict:
    state = load_checkpoint(run / "final.pt")
    if state.get("algo") != "residual" or (state.get("extra") or {}).get("td3") is None:
        raise SystemExit(f"{run / 'final.pt'}: not a residual run's checkpoint with its critics (a slimmed one has none)")
    hp = state["config"]["residual"]
    policy = load_policy(state)
    settings = TD3Settings(**{f.name: hp.get(f.name, f.default) for f in dataclasses.fields(TD3Settings)})  # older runs lack newer keys
    td3 = ResidualTD3(policy, settings, hp["critic_hidden_sizes"])
    td3.load_state_dict(state["extra"]["td3"])
    replay = FeatureReplay(hp["buffer_size"], policy.feature_dim, policy.action_shape, hp["gamma"], hp["n_step"])
    replay.load_state_dict(load_checkpoint(run / "replay.pt"))
    generator = torch.Generator().manual_seed(seed)
    rows = [td3.action_gains(replay.sample(batch_size, generator)) for _ in range(batches)]
    mean = {key: sum(row[key] for row in rows) / len(rows) for key in rows[0]}
    return {"run": str(run), "env_steps": state["counters"]["num_timesteps"], "replay_decisions": len(replay),
            "replay_success_episodes": replay.successes / max(replay.episodes, 1), "residual_l2": settings.residual_l2,
            "scale": policy.scale, "batches": batches, "batch_size": batch_size,
            "actor_q_gain": mean["train/actor/q_gain"], "best_gain": mean["train/critic/best_gain"],
            "best_residual_frac": mean["train/critic/best_residual_frac"]}


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("--run", required=True, type=pathlib.Path, help="a residual run's folder (final.pt, replay.pt)")
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--out", type=pathlib.Path, help="write the JSON here too")
    args = parser.parse_args(argv)
    result = probe(args.run, args.batches, args.batch_size)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        atomic_write_text(args.out, text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
