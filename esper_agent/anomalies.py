"""Named anomaly checks run on every update's statistics.

Each check reads the update's metrics (see :mod:`esper_agent.telemetry` for the names) and returns a short
string ``"<name>: <what was measured> <comparison> <threshold>"``. Missing or NaN statistics never raise an
alarm (a head that was never available has NaN entropy, which is not a collapse).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from esper_agent.config import AgentConfig
from esper_env.spaces import HEAD_NAMES

ANOMALY_NAMES = ("ratio_explosion", "ratio_collapse", "nonfinite_loss", "entropy_collapse", "kl_spike",
                 "value_collapse")


def _get(metrics: Mapping[str, float], key: str) -> float:
    value = metrics.get(key, math.nan)
    return float(value) if value is not None else math.nan


def detect_anomalies(metrics: Mapping[str, float], cfg: AgentConfig) -> list[str]:
    """The anomalies present in one update's metrics, as ``"name: detail"`` strings (empty if none)."""
    found = []
    ratio_max, ratio_min = _get(metrics, "ppo/ratio_max"), _get(metrics, "ppo/ratio_min")
    if ratio_max > cfg.anomaly_ratio_max:
        found.append(f"ratio_explosion: max joint ratio {ratio_max:.4g} > {cfg.anomaly_ratio_max}")
    if ratio_min < cfg.anomaly_ratio_min:
        found.append(f"ratio_collapse: min joint ratio {ratio_min:.4g} < {cfg.anomaly_ratio_min}")
    skipped = _get(metrics, "ppo/nonfinite_steps")
    if skipped > 0:
        found.append(f"nonfinite_loss: {int(skipped)} minibatch step(s) skipped for a non-finite loss or gradient")
    imitating = _get(metrics, "imitation/active") == 1.0  # fitting a deterministic teacher: low entropy is the aim
    for head in HEAD_NAMES if not imitating else ():
        entropy = _get(metrics, f"entropy/{head}")
        if entropy < cfg.anomaly_entropy_min:
            found.append(f"entropy_collapse/{head}: conditional normalised entropy {entropy:.4g} "
                         f"< {cfg.anomaly_entropy_min}")
    kl_max = _get(metrics, "ppo/kl_max")
    if kl_max > cfg.anomaly_kl_max:
        found.append(f"kl_spike: minibatch joint KL {kl_max:.4g} > {cfg.anomaly_kl_max}")
    value_std, returns_std = _get(metrics, "value/std"), _get(metrics, "value/returns_std")
    if returns_std > 1e-6 and value_std < cfg.anomaly_value_std_ratio * returns_std:
        found.append(f"value_collapse: std(V) {value_std:.4g} < {cfg.anomaly_value_std_ratio} * std(returns) "
                     f"{returns_std:.4g}")
    return found


__all__ = ["detect_anomalies", "ANOMALY_NAMES"]
