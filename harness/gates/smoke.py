"""The board's first checks (`pytest -m smoke`), in the order a new board fails them: the NPU device node,
the runtime and driver versions, one subgraph's lifecycle. Each problem is one line that says what to fix,
citing the docs/board.md section that shows how (SECTIONS; tests/unit/test_smoke_tier.py checks each exists).

The NPU device node depends on the kernel (docs/board.md, section 'The image: vendor (BSP) kernel, not mainline'):
    dev/rknpu               the vendor RKNPU driver as a misc device (older BSP kernels)
    dev/dri/renderD*        the vendor RKNPU driver as a DRM render node (BSP 5.10/6.1): the one whose
                            sys/class/drm/renderD*/device/uevent says DRIVER=RKNPU (the GPU has another)
    dev/accel/accel*        the mainline Rocket driver (accel subsystem): librknnrt cannot use it
The kernel says the RKNPU driver is loaded in /sys and /proc even where /dev does not show its node (a
container given the host's /sys but not the device): that is a missing device, not a wrong kernel.
All paths are read under a root (the suite's --telemetry-root), so tests run against tests/data/sysfs-rk3588.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..backends import BackendOptions, create_context
from .versions import read, shown

__all__ = ["NpuNode", "find_npu_node", "rknpu_driver_signs", "npu_node_problem", "version_problem",
           "lifecycle_once", "GUIDE", "SECTIONS", "see"]

GUIDE = "docs/board.md"
# The guide's sections the messages cite, by heading (without its number).
SECTIONS = {
    "kernel": "The image: vendor (BSP) kernel, not mainline",
    "librknnrt": "librknnrt",
    "node": "The NPU device node and its permissions",
    "container": "The NPU in a container",
    "partition": "The embedded model's partition: shipped, or converted on the PC",
}
_RKNPU_DRIVER = "DRIVER=RKNPU"
_ROCKET_DRIVER = "DRIVER=rocket"


@dataclass(frozen=True)
class NpuNode:
    path: Path | None           # the node under the root, or None
    driver: str | None          # "rknpu" (vendor, librknnrt works) or "rocket" (mainline, it does not)

    def shown(self, root: Path) -> str:
        return "/" + str(self.path.relative_to(root)) if self.path else "none"


def see(section: str) -> str:
    """The citation a message ends with: the guide and the section's heading."""
    return f"{GUIDE}, section '{SECTIONS[section]}'"


def _uevent_says(device_dir: Path, line: str) -> bool:
    try:
        return line in (device_dir / "device" / "uevent").read_text(errors="replace").splitlines()
    except OSError:
        return False


def find_npu_node(root: str | Path = "/") -> NpuNode:
    """The NPU's device node under `root` and which driver made it."""
    root = Path(root)
    if (root / "dev/rknpu").exists():
        return NpuNode(root / "dev/rknpu", "rknpu")
    for drm in sorted((root / "sys/class/drm").glob("renderD*")):
        if _uevent_says(drm, _RKNPU_DRIVER) and (root / "dev/dri" / drm.name).exists():
            return NpuNode(root / "dev/dri" / drm.name, "rknpu")
    for accel in sorted((root / "sys/class/accel").glob("accel*")):
        if _uevent_says(accel, _ROCKET_DRIVER):
            return NpuNode(root / "dev/accel" / accel.name, "rocket")
    return NpuNode(None, None)


def rknpu_driver_signs(root: str | Path = "/") -> list[tuple[str, str | None]]:
    """Where /sys and /proc under `root` say the RKNPU driver is loaded: [(what says so, the /dev node it
    makes, or None when that sign names none)]. Readable without root, in a container too."""
    root = Path(root)
    signs: list[tuple[str, str | None]] = [(f"/sys/class/drm/{drm.name}/device/uevent says {_RKNPU_DRIVER}",
                                            f"/dev/dri/{drm.name}")
             for drm in sorted((root / "sys/class/drm").glob("renderD*")) if _uevent_says(drm, _RKNPU_DRIVER)]
    if (root / "sys/class/misc/rknpu").exists():
        signs.append(("/sys/class/misc/rknpu exists", "/dev/rknpu"))
    elif _proc_misc_lists(root, "rknpu"):
        signs.append(("/proc/misc lists rknpu", "/dev/rknpu"))
    if (root / "sys/bus/platform/drivers/RKNPU").is_dir():
        signs.append(("/sys/bus/platform/drivers/RKNPU exists", None))
    return signs


def _proc_misc_lists(root: Path, name: str) -> bool:
    try:
        lines = (root / "proc/misc").read_text(errors="replace").splitlines()
    except OSError:
        return False
    return any(line.split()[1:2] == [name] for line in lines)


def npu_node_problem(root: str | Path = "/") -> str | None:
    """Why RKNNLite cannot open the NPU here (what to fix), or None."""
    root = Path(root)
    node = find_npu_node(root)
    if node.driver == "rocket":
        return (f"NPU device node {node.shown(root)} belongs to the mainline Rocket driver, which librknnrt "
                f"cannot use: boot a vendor (BSP) kernel with the RKNPU driver ({see('kernel')})")
    if node.path is None:
        return _no_node_problem(root)
    if not os.access(node.path, os.R_OK | os.W_OK):
        return (f"NPU device node {node.shown(root)} is not read-write for this user: add the user to the "
                f"node's group (sudo usermod -aG render,video $USER, then log in again; {see('node')})")
    return None


def _no_node_problem(root: Path) -> str:
    """No node: a kernel without the RKNPU driver, or (the driver loaded) a /dev that does not show it."""
    where = "" if root == Path("/") else f" under {root}"
    signs = rknpu_driver_signs(root)
    if signs:
        evidence, _ = signs[0]
        named = sorted({n for _, n in signs if n})
        nodes = " or ".join(named or ["/dev/rknpu", "/dev/dri/renderD*"])
        return (f"the RKNPU driver is loaded ({evidence}) but its device node {nodes} is not visible{where}: "
                f"the kernel is right; this looks like a container that was not given the device: pass "
                f"{named[0] if named else 'the node'} into it ({see('container')})")
    return (f"no NPU device node{where} and no sign of the RKNPU driver: neither /dev/rknpu nor a "
            f"/dev/dri/renderD* of the RKNPU driver ({_RKNPU_DRIVER} in /sys/class/drm/renderD*/device/uevent), "
            f"nothing in /proc/misc or /sys/bus/platform/drivers/RKNPU. Boot a vendor (BSP) kernel with the "
            f"RKNPU driver ({see('kernel')})")


def version_problem(versions: dict, converted_with: str | None) -> str | None:
    """librknnrt must be at least the toolkit version that converted the partition (else the runtime
    refuses the files with "Invalid RKNN model version"); None when it is, or when nothing says. Ordered as
    PEP 440 orders them (harness/gates/versions.py): 2.5 is not older than 2.5.0, 2.3.0rc1 is older than
    2.3.0; a version that is not one is not ordered."""
    api = versions.get("api")
    if api is None or not api.strip():
        return "get_sdk_version() gave no librknnrt (API) version" if api is None else \
            "librknnrt's version is unreadable (an empty version string)"
    if converted_with and read(api).older_than(read(converted_with)):
        return (f"librknnrt {shown(api, '')} is older than rknn-toolkit2 {converted_with}, which converted the "
                f"partition: install librknnrt.so {converted_with} or newer (or point LIBRKNNRT_PATH at it; "
                f"{see('librknnrt')})")
    return None


def lifecycle_once(options: BackendOptions, entry, path: Path) -> tuple[dict, list[np.ndarray]]:
    """Load, init, run (zeros of each input's manifest shape and dtype) and release one subgraph:
    ({stage: seconds}, outputs). Raises the backend's HarnessError naming the subgraph and stage."""
    inputs = [np.zeros(spec.shape, dtype=spec.dtype) for spec in entry.inputs]
    ctx = create_context(options, entry.label)
    seconds: dict[str, float] = {}
    try:
        for stage, call in (("load", lambda: ctx.load(path)), ("init", ctx.init)):
            start = time.perf_counter()
            call()
            seconds[stage] = time.perf_counter() - start
        start = time.perf_counter()
        outputs = ctx.run(inputs)
        seconds["run"] = time.perf_counter() - start
    finally:
        start = time.perf_counter()
        ctx.release()
        seconds["release"] = time.perf_counter() - start
    return seconds, outputs
