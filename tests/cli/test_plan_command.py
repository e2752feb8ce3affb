"""``recipe plan``: the cluster profiles' plans print and fit; a missing or invalid config.json exits 2."""

from pathlib import Path

import pytest

from cli.main import main

MODEL_CONFIGS = Path(__file__).resolve().parents[2] / "deployments" / "model_configs"


def _rows(text: str) -> dict[str, str]:
    """The table's rows: quantity → value (columns two spaces apart)."""
    rows = {}
    for line in text.splitlines():
        cells = [cell for cell in line.strip().split("  ") if cell]
        if len(cells) >= 2:
            rows[cells[0].strip()] = cells[1].strip()
    return rows


@pytest.mark.parametrize(
    ("profile", "kv", "concurrency", "train_memory"),
    [
        ("qwen36-35b", "20.0 KiB", "730", "72.6 GiB of 141.0 GiB"),
        ("qwen35-397b", "30.0 KiB", "132", "113.6 GiB of 141.0 GiB"),
    ],
)
def test_cluster_profiles_plan_and_fit(capsys, profile: str, kv: str, concurrency: str, train_memory: str) -> None:
    assert main(["plan", "--profile", profile]) == 0
    out = capsys.readouterr().out
    rows = _rows(out)
    assert rows["KV per token"] == kv and rows["algorithmic ceiling"] == "1024"
    assert rows["concurrency"] == concurrency and rows["train memory per GPU"] == train_memory
    assert rows["train fits"] == rows["engine fits"] == "yes" and rows["layout"] == "ok"
    assert out.rstrip().endswith("plan fits")


def test_a_config_with_layout_flags_and_a_node_split(capsys) -> None:
    argv = ["plan", "--config", str(MODEL_CONFIGS / "qwen3.6-35b-a3b.json"), "--engines", "12", "--inference-nodes",
            "12", "--train-nodes", "4", "--tp", "8", "--ep", "8", "--max-staleness", "3", "--prompts-per-step", "16",
            "--samples-per-prompt", "16", "--trajectory-tokens", "40000", "--gen-per-node", "0.5",
            "--train-per-node", "1.5"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    rows = _rows(out)
    assert rows["engines"] == "12 × TP8 on 12 nodes" and rows["algorithmic ceiling"] == "1024"
    assert rows["concurrency"] == "1024"  # 40k-token trajectories: the staleness bound is the tighter ceiling
    assert "node split of 16 nodes for trainer idle ≈ 0: 12 inference : 4 train (idle share 0%; now 12:4" in out


def test_a_plan_that_does_not_fit_exits_1(capsys) -> None:
    assert main(["plan", "--profile", "qwen35-397b", "--train-nodes", "1", "--pp", "1", "--cp", "1", "--ep", "8"]) == 1
    out = capsys.readouterr().out
    assert _rows(out)["train fits"] == "NO" and "plan does NOT fit" in out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read model config"),
        ("{not json", "is not valid JSON"),
        ('{"architectures": ["X"]}', "lacks hidden_size, num_hidden_layers, num_attention_heads, vocab_size"),
        ("[1, 2]", "is not a JSON object"),
    ],
)
def test_a_missing_or_invalid_config_exits_2(capsys, tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "config.json"
    if content is not None:
        path.write_text(content)
    assert main(["plan", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("recipe: error: ") and message in err


def test_a_profile_without_a_model_config_exits_2(capsys) -> None:
    assert main(["plan", "--profile", "local"]) == 2
    assert "names no cluster.hf_config; pass --config" in capsys.readouterr().err
    assert main(["plan", "--profile", "qwen36-35b", "--gen-per-node", "1"]) == 2
    assert "go together" in capsys.readouterr().err
