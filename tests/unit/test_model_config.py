"""model.toml and the profiles in both formats: format 2 names the text embedding's size text_emb_dim /
text_emb_tokens, format 1 (no `format` key) said context_dim / context_tokens and still loads; a file
mixing the two is one error naming the file."""
from __future__ import annotations

import pytest

from harness.core.errors import ConfigError
from harness.model.config import EMBEDDED_DIR, FORMAT, load_model_dir, load_profile

FORMAT_LINE = f"format = {FORMAT}"


def _format_1(text: str) -> str:
    """The embedded model's model.toml as format 1 wrote it."""
    assert FORMAT_LINE in text and "text_emb_dim = " in text and "text_emb_tokens = " in text
    text = "\n".join(line for line in text.splitlines() if not line.startswith(FORMAT_LINE)) + "\n"
    return text.replace("text_emb_dim = ", "context_dim = ").replace("text_emb_tokens = ", "context_tokens = ")


@pytest.fixture
def model_toml() -> str:
    return (EMBEDDED_DIR / "model.toml").read_text()


def test_an_old_format_model_toml_loads_as_today(tmp_path, model_toml):
    path = tmp_path / "model.toml"
    path.write_text(_format_1(model_toml))
    old, new = load_profile(path), load_model_dir(EMBEDDED_DIR)
    assert (old.text_emb_dim, old.text_emb_tokens) == (new.text_emb_dim, new.text_emb_tokens) == (32, 8)
    assert old == load_profile(path) and {**vars(old), "source": ""} == {**vars(new), "source": ""}


@pytest.mark.parametrize("change, said", [
    (lambda t: _format_1(t).replace("context_tokens = 8", "context_tokens = 8\ntext_emb_tokens = 8"),
     "[image] has both context_tokens (format 1) and text_emb_tokens (format 2)"),
    (lambda t: t.replace("text_emb_dim = ", "context_dim = "), "[network] context_dim is format 1's name"),
    (lambda t: t.replace(FORMAT_LINE, "format = 7"), "format 7 is not one this suite reads"),
])
def test_mixed_formats_are_one_error_naming_the_file(tmp_path, model_toml, change, said):
    path = tmp_path / "model.toml"
    path.write_text(change(model_toml))
    with pytest.raises(ConfigError) as caught:
        load_profile(path)
    assert str(caught.value).startswith(f"{path}: ") and said in str(caught.value), caught.value


@pytest.mark.parametrize("name", ["anima-2b", "cosmos-tiny"])
def test_the_profiles_are_written_in_todays_format(name):
    from harness.model.config import PROFILES_DIR
    text = (PROFILES_DIR / f"{name}.toml").read_text()
    assert FORMAT_LINE in text and "context_" not in text.split("[network]", 1)[1]
    assert load_profile(name).text_emb_dim > 0
