"""The lab: LAVA jobs for each board profile (jobs), the board's directories (setup), what a LAVA
session reports (results) and the NPU check it runs before the gates (node)."""
