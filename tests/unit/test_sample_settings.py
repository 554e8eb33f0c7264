"""Sample settings are a typed record; as_dict() is what the run report stores."""
from __future__ import annotations

import json

import pytest

from harness.core.atomic import atomic_write_json
from harness.model.bundle import load_bundle
from harness.model.config import EMBEDDED_DIR
from harness.sampling.reference_run import sample_settings
from harness.sampling.settings import SampleSettings


def test_typed_fields_from_the_model_and_the_command_line():
    s = sample_settings(load_bundle(EMBEDDED_DIR), steps=3, seed=9)
    assert isinstance(s, SampleSettings) and (s.steps, s.seed, s.sampler, s.spectrum) == (3, 9, "flow-euler", None)
    assert isinstance(s.cfg_scale, float) and isinstance(s.shift, float)


def test_as_dict_is_the_report_shape(tmp_path):
    s = SampleSettings(steps=2, cfg_scale=4.0, shift=3.0, seed=1)
    assert s.as_dict() == {"steps": 2, "cfg_scale": 4.0, "shift": 3.0, "seed": 1, "sampler": "flow-euler"}
    spectrum = SampleSettings(steps=28, cfg_scale=4.0, shift=3.0, seed=1, sampler="spectrum", spectrum={"warmup": 5})
    assert spectrum.as_dict()["spectrum"] == {"warmup": 5} and len(spectrum.as_dict()) == 6
    atomic_write_json(tmp_path / "s.json", {"settings": spectrum.as_dict()})
    assert json.loads((tmp_path / "s.json").read_text())["settings"] == spectrum.as_dict()
    with pytest.raises(AttributeError):
        s.steps = 5     # frozen: a run's settings do not change under it
