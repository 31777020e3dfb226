"""What tests/udp's files share: the environment of a run under vsocket."""

import pytest


@pytest.fixture
def vs_env(tmp_path):
    """Statistics and a debug log of the run's own, in TMP_PATH."""
    stats = tmp_path / "stats"
    stats.mkdir()
    return {"VSOCKET_STATS_DIR": str(stats), "VSOCKET_LOG_LEVEL": "debug",
            "VSOCKET_LOG_FILE": str(tmp_path / "vsocket.log")}
