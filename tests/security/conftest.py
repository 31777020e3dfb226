"""With VSOCKET_ALL_SKIPPED_RC set (run.sh, for ctest), a run in which
every test was skipped (not root, no user nobody...) exits with that status
instead of 0, so that ctest reports it as skipped rather than passed."""

import os


def pytest_sessionfinish(session, exitstatus):
    rc = os.environ.get("VSOCKET_ALL_SKIPPED_RC")
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    if not rc or exitstatus != 0 or tr is None:
        return
    stats = tr.stats
    if stats.get("skipped") and not any(stats.get(k) for k in ("passed", "failed", "error",
                                                                "xfailed", "xpassed")):
        session.exitstatus = int(rc)
