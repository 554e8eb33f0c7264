"""The memory budget of a board: the added PSS its contexts may take, derived from the board
profile's RAM, the MemAvailable floor and the residency probe (boards/data/rock5c-anima.toml
[plan] probe_ram_total_gib says the model, an assumption).

The probe's last row within the gates (swap growth under the limit) is what the board held safely;
what else the probing board held is its RAM minus the floor minus that row, and is taken not to grow
with RAM: a board with more RAM gives the difference to contexts.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import ConfigError

__all__ = ["derived_budget"]

GiB_in_MiB = 1024.0


@dataclass(frozen=True)
class Budget:
    mib: float
    how: str


def last_passing_row(profile) -> dict:
    """The probe's last row whose swap growth stayed within the [gates] limit."""
    limit = profile.get("gates.swap_growth_limit_mib")
    rows = [r for r in profile.probe_rows() if float(r.get("swap_growth_mib", 0.0)) <= limit]
    if not rows:
        raise ConfigError(f"{profile.path}: no residency_probe row within swap_growth_limit_mib {limit:g}")
    return rows[-1]


def derived_budget(profile) -> Budget:
    """RAM total - MemAvailable floor - what else the probing board held."""
    ram = profile.get("board.ram_total_gib") * GiB_in_MiB
    floor = profile.get("gates.mem_available_floor_gib") * GiB_in_MiB
    probe_ram = profile.get("plan.probe_ram_total_gib") * GiB_in_MiB
    row = last_passing_row(profile)
    other = probe_ram - floor - float(row["pss_added_mib"])
    mib = ram - floor - other
    if mib <= 0:
        raise ConfigError(f"{profile.path}: [board] ram_total_gib {ram / GiB_in_MiB:g} leaves no memory for "
                          f"contexts (floor {floor:.0f} MiB, other residents {other:.1f} MiB)")
    how = (f"RAM {ram:.0f} MiB - MemAvailable floor {floor:.0f} MiB - other residents {other:.1f} MiB "
           f"(the probing board's {probe_ram:.0f} MiB - floor - its last row within the memory gates, "
           f"{row['contexts']} contexts at {float(row['pss_added_mib']):.1f} MiB; assumed not to grow with RAM)")
    return Budget(mib, how)
