"""model.toml and the profiles: a file without `format` is read as the current one; another format, or a
missing key, is one error naming the file."""
from __future__ import annotations

import pytest

from harness.core.errors import ConfigError
from harness.model.config import EMBEDDED_DIR, FORMAT, load_model_dir, load_profile

FORMAT_LINE = f"format = {FORMAT}"


@pytest.fixture
def model_toml() -> str:
    text = (EMBEDDED_DIR / "model.toml").read_text()
    assert FORMAT_LINE in text and "text_emb_dim = " in text
    return text


def test_a_model_toml_without_format_is_read_as_the_current_one(tmp_path, model_toml):
    path = tmp_path / "model.toml"
    path.write_text(model_toml.replace(FORMAT_LINE, ""))
    given, embedded = load_profile(path), load_model_dir(EMBEDDED_DIR)
    assert {**vars(given), "source": ""} == {**vars(embedded), "source": ""}


@pytest.mark.parametrize("change, said", [
    (lambda t: t.replace(FORMAT_LINE, "format = 7"), "format 7 is not one this suite reads (2)"),
    (lambda t: t.replace("text_emb_dim = ", "text_dim = "), "text_emb_dim"),
])
def test_another_format_or_a_missing_key_is_one_error_naming_the_file(tmp_path, model_toml, change, said):
    path = tmp_path / "model.toml"
    path.write_text(change(model_toml))
    with pytest.raises(ConfigError) as caught:
        load_profile(path)
    assert str(caught.value).startswith(f"{path}") and said in str(caught.value), caught.value


@pytest.mark.parametrize("name", ["anima-2b", "cosmos-tiny"])
def test_the_profiles_are_written_in_the_current_format(name):
    from harness.model.config import PROFILES_DIR
    assert FORMAT_LINE in (PROFILES_DIR / f"{name}.toml").read_text()
    assert load_profile(name).text_emb_dim > 0
