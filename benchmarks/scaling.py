"""Agent training over several GPUs with torchrun: aggregate env steps/s and host-training images/s.

For each process count N of ``--nproc`` the launcher starts

    python -m torch.distributed.run --standalone --nproc-per-node N -m benchmarks.scaling --worker ...

and each worker trains esper_agent as ``python -m esper_agent.train`` does under torchrun (the same
``Trainer``, ``esper_agent.distributed`` and per-rank env kwargs; ``--num-envs`` sub-envs per process):
``--warmup`` updates (CUDA graph captures, allocator growth), then ``--updates`` timed updates. Rates count every
rank: env steps (sub-env transitions) and host-training images (the env's ``info["images_trained"]``, as in
``benchmarks/throughput.py``) over the wall time of the timed updates, rollouts and PPO updates included; the
rollout-only rates are reported too. Scaling efficiency = rate(N GPUs) / (N * rate(1 GPU)) with the load per GPU
fixed. ``--single-process-devices`` adds the one-process alternative: N * num_envs sub-envs spread over the N
GPUs by the env kwarg ``devices=[...]``, one agent on cuda:0.

    python -m benchmarks.scaling --nproc 1 2 --env Esper-CIFAR10-Fast-v0 --num-envs 8 --device cuda \\
        --single-process-devices --out benchmarks/results
    python -m benchmarks.scaling --smoke --out runs/scaling-smoke   # CPU, gloo, tiny synthetic env: the same code path

Writes ``scaling-<device>.json`` and ``scaling-<device>.md`` (the device named by rank 0) under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import child_env, device_name, device_tag, run_stamp, write_atomic, write_json
from esper_agent import distributed, train
from esper_agent.config import AgentConfig
from esper_agent.trainer import Trainer

SMOKE = {"env": "Esper-Synthetic-v0", "num_envs": 2, "device": "cpu", "warmup": 1, "updates": 1,
         "env_kwargs": {"device": "cpu", "max_epochs": 3, "batch_size": 64, "eval_batch_size": 128,
                        "synthetic_train_size": 256, "synthetic_val_size": 128, "synthetic_test_size": 64,
                        "synthetic_image_size": 16},
         "agent_kwargs": {"rollout_steps": 3, "hidden_size": 16, "update_epochs": 1, "num_minibatches": 1}}
"""``--smoke``: a few seconds per launch on a 2-core CPU."""


def _sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(torch.device(device))  # sync: timing boundary


def _finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0


def worker(args: argparse.Namespace) -> None:
    """One process of a measurement (under torchrun, or alone for the ``devices=[...]`` row)."""
    ranks = distributed.init(args.device)
    device = str(ranks.device) if isinstance(ranks, distributed.ProcessGroup) else args.device
    env_kwargs = distributed.rank_env_kwargs(args.env, args.env_kwargs, ranks)
    envs = train.make_envs(args.env, args.num_envs, env_kwargs)
    trainer = Trainer(envs, AgentConfig(**args.agent_kwargs), device=device, seed=0,
                      total_updates=args.warmup + args.updates, ranks=ranks)
    for _ in range(args.warmup):
        trainer.update()
    _sync(device)
    ranks.barrier()
    start, steps_before = time.perf_counter(), trainer.env_steps
    rows = [trainer.update() for _ in range(args.updates)]
    _sync(device)
    ranks.barrier()
    wall = time.perf_counter() - start
    env_devices = [train.resolve_device(d) for d in env_kwargs.get("devices") or [env_kwargs.get("device", device)]]
    env_devices = ranks.gather_objects(env_devices)
    names = ranks.gather_objects([device_name(d) for d in env_devices[ranks.rank]])
    envs.close()
    if ranks.is_main:
        _write_result(args, ranks, device, trainer.env_steps - steps_before, rows, wall, (env_devices, names))
    # No rank leaves while another still works: a rank that exits tears down its gloo connections, and a peer
    # still holding them aborted ("terminate called without an active exception") in about 1 run of 6 on CPU.
    ranks.barrier()


def _write_result(args: argparse.Namespace, ranks: distributed.SingleProcess, device: str, steps: int,
                  rows: list[dict], wall: float, devices: tuple[list[list[str]], list[list[str]]]) -> None:
    """Rank 0's result file: throughput over the timed updates; ``devices`` = (env devices, their names) per rank."""
    env_devices, names = devices
    images = sum(_finite(r["time/host_images_per_s"]) * r["time/rollout_s"] for r in rows)
    rollout_s = sum(r["time/rollout_s"] for r in rows)
    gpus = len({d for part in env_devices for d in part if d.startswith("cuda")})
    result = {"mode": "devices" if args.env_kwargs.get("devices") else "torchrun", "processes": ranks.world_size,
              "gpus": gpus, "sub_envs": args.num_envs * ranks.world_size, "env_devices": env_devices,
              "device_names": names, "agent_device": device,
              "env_steps": steps, "images": images, "wall_s": wall, "env_steps_per_s": steps / wall,
              "images_per_s": images / wall, "rollout_env_steps_per_s": steps / rollout_s,
              "rollout_images_per_s": images / rollout_s, "rollout_s": rollout_s / len(rows),
              "update_s": sum(r["time/update_s"] for r in rows) / len(rows)}
    Path(args.result).write_text(json.dumps(result, indent=1))


def _worker_args(args: argparse.Namespace, result: Path, num_envs: int, env_kwargs: dict[str, Any]) -> list[str]:
    return ["--worker", "--result", str(result), "--env", args.env, "--env-kwargs", json.dumps(env_kwargs),
            "--num-envs", str(num_envs), "--device", args.device, "--agent-kwargs", json.dumps(args.agent_kwargs),
            "--warmup", str(args.warmup), "--updates", str(args.updates)]


def launch(args: argparse.Namespace, nproc: int, devices: list[str] | None = None) -> dict[str, Any]:
    """One measurement in fresh processes: torchrun with ``nproc`` processes, or one process over ``devices``."""
    tag = f"devices{len(devices)}" if devices else f"nproc{nproc}"
    result = args.out / f".scaling-{tag}.json"
    result.unlink(missing_ok=True)
    if devices:
        worker_args = _worker_args(args, result, args.num_envs * len(devices), args.env_kwargs | {"devices": devices})
        command = [sys.executable, "-m", "benchmarks.scaling", *worker_args]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                   "-m", "benchmarks.scaling", *_worker_args(args, result, args.num_envs, args.env_kwargs)]
    env = child_env(NCCL_NVLS_ENABLE=os.environ.get("NCCL_NVLS_ENABLE", "0"))
    if args.device == "cpu":
        env["OMP_NUM_THREADS"] = "1"  # processes share the cores; extra threads only contend
    print("$", " ".join(command), flush=True)
    started = time.perf_counter()
    try:
        completed = subprocess.run(command, env=env, timeout=args.timeout)
    except subprocess.TimeoutExpired as error:
        raise SystemExit(f"scaling: the {tag} run took more than --timeout {args.timeout} s; stopped") from error
    if completed.returncode != 0 or not result.exists():
        raise SystemExit(f"scaling: the {tag} run failed (exit code {completed.returncode}); its output is above")
    row = json.loads(result.read_text())
    result.unlink()
    print(f"{tag}: {row['env_steps_per_s']:.2f} env steps/s, {row['images_per_s']:,.0f} images/s "
          f"({time.perf_counter() - started:.0f} s with start-up)", flush=True)
    return row


def preflight(args: argparse.Namespace) -> None:
    """Fail before launching anything when the machine cannot run what was asked."""
    if args.device == "cpu":
        return
    if not torch.cuda.is_available():
        raise SystemExit(f"scaling: --device {args.device} but CUDA is not available (use --smoke for a CPU run)")
    needed, found = max(args.nproc), torch.cuda.device_count()
    if found < needed:
        raise SystemExit(f"scaling: --nproc {max(args.nproc)} needs {needed} GPUs; this machine has {found}")
    if not torch.distributed.is_nccl_available():
        raise SystemExit("scaling: this torch build has no NCCL; multi-GPU runs need it")


def efficiencies(rows: list[dict[str, Any]]) -> None:
    """Adds rate(N GPUs) / (N * rate(1 GPU)) to every row, against the 1-process torchrun row."""
    base = next((r for r in rows if r["mode"] == "torchrun" and r["processes"] == 1), None)
    for row in rows:
        scale = len(row["env_devices"][0]) if row["mode"] == "devices" else row["processes"]
        for key in ("env_steps_per_s", "images_per_s"):
            ok = base is not None and base[key] > 0
            row[f"efficiency_{key}"] = row[key] / (scale * base[key]) if ok else math.nan


def markdown(report: dict[str, Any]) -> str:
    rows = report["rows"]
    names = sorted({n for r in rows for part in r["device_names"] for n in part})
    lines = [f"esper_agent training (rollouts + PPO updates) on `{report['env']}`, {report['num_envs']} sub-envs "
             f"per GPU (per process), {report['updates']} timed updates after {report['warmup']} warm-up; devices: "
             f"{', '.join(names)}; torch {report['torch']}, NCCL {report['nccl']}, NCCL_NVLS_ENABLE="
             f"{report['nccl_nvls_enable']}.", "",
             "| run | processes | GPUs | sub-envs | env steps/s | host images/s | efficiency (steps, images) | "
             "rollout s | PPO update s |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        run = "torchrun" if r["mode"] == "torchrun" else f"one process, devices=[{', '.join(r['env_devices'][0])}]"
        lines.append(f"| {run} | {r['processes']} | {r['gpus']} | {r['sub_envs']} | {r['env_steps_per_s']:,.2f} | "
                     f"{r['images_per_s']:,.0f} | {r['efficiency_env_steps_per_s']:.2f}, "
                     f"{r['efficiency_images_per_s']:.2f} | {r['rollout_s']:.2f} | {r['update_s']:.3f} |")
    lines += ["", "Efficiency = rate(N GPUs) / (N x rate(1 GPU)) with the same sub-envs per GPU; rates count every "
              "process over the wall time of the timed updates."]
    return "\n".join(lines) + "\n"


def measure(args: argparse.Namespace) -> dict[str, Any]:
    preflight(args)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [launch(args, n) for n in args.nproc]
    if args.single_process_devices:
        count = max(args.nproc)
        devices = [f"cuda:{i}" for i in range(count)] if args.device != "cpu" else ["cpu"] * count
        rows.append(launch(args, 1, devices))
    efficiencies(rows)
    nccl = torch.cuda.nccl.version() if torch.cuda.is_available() else "n/a (gloo)"
    nccl = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    return {"env": args.env, "env_kwargs": args.env_kwargs, "num_envs": args.num_envs,
            "agent": AgentConfig(**args.agent_kwargs).to_dict(), "warmup": args.warmup, "updates": args.updates,
            "nccl": nccl, "nccl_nvls_enable": os.environ.get("NCCL_NVLS_ENABLE", "0"), **run_stamp(), "rows": rows}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, nargs="+", default=[1, 2], help="process (GPU) counts to measure")
    parser.add_argument("--env", default="Esper-CIFAR10-Fast-v0")
    parser.add_argument("--env-kwargs", type=json.loads, default={}, help="JSON kwargs of gym.make_vec")
    parser.add_argument("--num-envs", type=int, default=8, help="sub-envs per process")
    parser.add_argument("--device", default="cuda", help="cuda (each process its cuda:LOCAL_RANK) or cpu (gloo)")
    parser.add_argument("--agent-kwargs", type=json.loads, default={}, help="JSON AgentConfig fields")
    parser.add_argument("--warmup", type=int, default=1, help="untimed updates first")
    parser.add_argument("--updates", type=int, default=3, help="timed updates")
    parser.add_argument("--single-process-devices", action="store_true",
                        help="also time one process spreading the sub-envs over the GPUs with devices=[...]")
    parser.add_argument("--timeout", type=int, default=600, help="seconds allowed per launch")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--tag", default=None, help="file name tag (default: the device name)")
    parser.add_argument("--smoke", action="store_true", help="CPU/gloo, tiny synthetic env, 1 timed update")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--result", default=None, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.worker:
        worker(args)
        return
    if args.smoke:
        vars(args).update(SMOKE | {"single_process_devices": True})
    report = measure(args)
    names = report["rows"][0]["device_names"][0]
    tag = args.tag or ("cpu" if args.device == "cpu" else device_tag(names[0]))
    write_json(args.out / f"scaling-{tag}.json", report)
    write_atomic(args.out / f"scaling-{tag}.md", markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
