"""The dashboard in a real headless Chromium (Selenium) against `evolvable serve` in its own process on
PostgreSQL: log in, find a run, open it, leave feedback (read back as a signal), open every page, with no
browser console errors; a tenant key sees only its tenant. Set EVOLVABLE_SCREENSHOT_DIR=docs/dashboard to
refresh the screenshots in the docs."""

from __future__ import annotations

import base64
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from tests.dashboard.stack import ADMIN_KEY, AGENT, admin, record_run, tenant_key
from tests.proxy.mock_upstream import MockUpstream

import evolvable
from evolvable.control import ControlPlane
from evolvable.control.models import DecisionState, Lever, Verdict, VersionKind, VersionState
from evolvable.protocol.harness import Harness, MemoryExemplar
from evolvable.protocol.models import ChatMessage
from evolvable.store import Store

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
CHROME_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1400,1000",
]


@pytest.fixture
def database(postgres_url: str) -> Iterator[str]:
    """A database of its own: the admin view lists everything in it."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    admin_engine = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin_engine.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield postgres_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin_engine.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin_engine.dispose()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def served(database: str, tmp_path: Path) -> Iterator[str]:
    """`evolvable serve` in its own process, in front of the mock upstream, with an admin key."""
    mock = MockUpstream().start()
    port = free_port()
    env = {
        **os.environ,
        "EVOLVABLE_ADMIN_KEY": ADMIN_KEY,
        "EVOLVABLE_HOME": str(tmp_path / "home"),
        "PYTHONPATH": os.pathsep.join(
            [str(Path(evolvable.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
        ),
    }
    config = tmp_path / "proxy.yaml"
    config.write_text(
        f"upstreams:\n  - {{name: mock, base_url: '{mock.url}'}}\nmodels:\n  alias-a: {{upstream: mock, model: mock}}\n"
    )
    log = (tmp_path / "serve.log").open("w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "evolvable.cli.main",
            "serve",
            "--db",
            database,
            "--port",
            str(port),
            "--config",
            str(config),
            "--control-interval",
            "0",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/ui/", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline, "serve did not start"
            time.sleep(0.3)
        yield url
    finally:
        process.terminate()
        process.wait(30)
        log.close()
        mock.stop()


def seed(url: str, database: str) -> dict[str, str]:
    """Two tenants' runs, an evolution history (a promoted memory change, a canary, a pending approval)."""
    store = Store.open(database)
    plane = ControlPlane(store, tenant="acme")  # control is per (tenant, agent): acme's agent, acme's runs
    base = Harness(agent=AGENT, system_prompt="You are the support desk. Look orders up before answering.")
    plane.bootstrap(base)
    acme, other = tenant_key(url, "acme"), tenant_key(url, "globex")
    for i in range(14):
        record_run(url, acme, cluster="orders" if i % 2 else "returns", outcome=float(i % 3 == 0))
    first = record_run(url, acme, judge=0.5, judge_confidence=0.4, outcome=0.0)
    better = plane.registry.register_harness(
        base.model_copy(
            update={
                "memory": [
                    MemoryExemplar(
                        id="m1",
                        cluster="orders",
                        task_input="Where is order A-1?",
                        messages=[ChatMessage(role="assistant", content="I looked order A-1 up: it has shipped.")],
                    )
                ]
            }
        ),
        note="memory from recorded failures",
    )
    decision = plane.journal.record_decision(
        AGENT,
        Lever.memory,
        state=DecisionState.canary,
        rationale="orders fail on missing lookups",
        evidence={"before": {"orders": [2, 7], "returns": [3, 7]}},
        predicted={"improve": ["orders"], "at_risk": []},
    )
    rollout = plane.journal.start_rollout(AGENT, VersionKind.harness, better.id, None, 0.2, decision.id)
    plane.registry.start_canary(better.id)
    plane.journal.update_decision(
        decision.id,
        candidate_kind=better.kind,
        candidate_version=better.id,
        rollout_id=rollout.id,
        gates={"replay": {"passed": True, "candidate": "18/36", "baseline": "6/36"}},
    )
    with admin(url) as client:
        client.post(f"/v1/control/rollouts/{rollout.id}/promote").raise_for_status()
    for i in range(14):
        record_run(url, acme, cluster="orders" if i % 2 else "returns", outcome=float(i % 5 != 0))
    plane.journal.update_decision(
        decision.id,
        verdict=Verdict.effective,
        verdict_detail={
            "clusters": {
                "orders": {"before": [2, 7], "after": [6, 7], "delta": 0.571},
                "returns": {"before": [3, 7], "after": [5, 7], "delta": 0.286},
            }
        },
    )
    pending = plane.registry.register_harness(
        base.model_copy(update={"system_prompt": base.system_prompt + " Be brief."})
    )
    approval = plane.journal.record_decision(
        AGENT, Lever.prompt, state=DecisionState.awaiting_approval, requires_approval=True, rationale="answers run long"
    )
    plane.journal.update_decision(
        approval.id,
        candidate_kind=pending.kind,
        candidate_version=pending.id,
        baseline_version=better.id,
        predicted={"improve": ["returns"], "at_risk": [], "note": "shorter answers"},
    )
    assert plane.registry.get(pending.id).state == VersionState.candidate
    record_run(url, other, agent="globex-bot", cluster="billing")
    running = record_run(url, acme, end=False)
    store.close()
    return {"acme": acme, "globex": other, "first": first, "running": running, "approval": approval.id}


def chrome(profile: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    for path in (CHROMIUM, CHROMEDRIVER):
        if shutil.which(path) is None:
            pytest.fail(f"{path} is missing: apt-get install chromium chromium-driver (.ci/run does)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")  # a fresh profile per run
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))


def log_in(wait: Any, key: str) -> None:
    """Types `key` into the login form and waits for the signed-in header."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    field = wait.until(ec.visibility_of_element_located((By.NAME, "key")))
    field.send_keys(key)
    field.submit()
    wait.until(ec.visibility_of_element_located((By.ID, "top")))


def test_dashboard_in_a_real_browser(served: str, database: str, tmp_path: Path) -> None:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    url = served
    data = seed(url, database)
    shots = Path(os.environ.get("EVOLVABLE_SCREENSHOT_DIR") or tmp_path / "shots")
    shots.mkdir(parents=True, exist_ok=True)
    driver = chrome(tmp_path / "chromium-profile")
    # The runs list re-renders when a poll brings changes: retry on elements it replaced.
    wait = WebDriverWait(driver, 30, ignored_exceptions=(StaleElementReferenceException,))

    def shot(name: str) -> None:
        """The whole page (up to 2,000 px tall), through the DevTools protocol."""
        time.sleep(0.3)  # let charts draw
        size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 2000), "scale": 1}
        png = driver.execute_cdp_cmd("Page.captureScreenshot", {"clip": clip, "captureBeyondViewport": True})
        (shots / f"{name}.png").write_bytes(base64.b64decode(png["data"]))

    def row_text(run: str) -> str:
        return wait.until(lambda d: d.find_element(By.CSS_SELECTOR, f'tr[data-run="{run}"]').text)

    def open_run(run: str) -> None:
        def click(d) -> bool:
            d.find_element(By.CSS_SELECTOR, f'tr[data-run="{run}"] a.run-link').click()
            return True

        wait.until(click)

    try:
        driver.get(f"{url}/ui/")
        shot("login")
        log_in(wait, ADMIN_KEY)
        # Trajectories: every tenant's runs for the admin key, the running one live.
        assert "running" in row_text(data["running"])
        shot("trajectories")
        with httpx.Client(base_url=url, headers={"authorization": f"Bearer {data['acme']}"}) as client:
            client.post(f"/v1/sessions/{data['running']}/end", json={"status": "failed"}).raise_for_status()
        wait.until(lambda d: "failed" in d.find_element(By.CSS_SELECTOR, f'tr[data-run="{data["running"]}"]').text)
        # Filters: one agent.
        agent = driver.find_element(By.CSS_SELECTOR, "#run-filters input[name=agent]")
        agent.send_keys("globex-bot")
        agent.submit()

        def only_globex(d) -> bool:
            rows = d.find_elements(By.CSS_SELECTOR, "tr[data-run]")
            return bool(rows) and all("globex-bot" in r.text for r in rows)

        wait.until(only_globex)
        driver.get(f"{url}/ui/#/runs")
        # Open a run: steps in order, redaction placeholders shown as such.
        open_run(data["first"])
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, ".step.tool_call")))
        placeholders = {e.text for e in driver.find_elements(By.CSS_SELECTOR, ".placeholder")}
        assert "<EMAIL_1>" in placeholders
        assert "jane.doe@example.com" not in driver.page_source
        kinds = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".step > div:first-child strong")]
        assert kinds == ["1. llm_call", "2. tool_call"]
        # Feedback: thumbs down with a comment, on the run.
        driver.find_element(By.NAME, "comment").send_keys("Looked up the wrong order")
        driver.find_element(By.ID, "thumbs-down").click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "feedback-result"), "stored as signal"))
        wait.until(ec.text_to_be_present_in_element((By.ID, "run-signals"), "user_feedback"))
        shot("trajectory")
        signals = httpx.get(
            f"{url}/v1/trajectories/{data['first']}", headers={"authorization": f"Bearer {data['acme']}"}, timeout=30
        ).json()["signals"]
        feedback = [s for s in signals if s["kind"] == "user_feedback"]
        assert len(feedback) == 1 and feedback[0]["value"] == 0.0 and feedback[0]["step_id"] is None
        assert feedback[0]["metadata"]["comment"] == "Looked up the wrong order" and feedback[0]["metadata"]["key_id"]
        # Feedback page: the annotation queue (the run above was rated, so it left the queue).
        driver.get(f"{url}/ui/#/feedback")
        wait.until(ec.presence_of_element_located((By.ID, "queue-empty")))
        shot("feedback")
        # Control plane: versions, the promoted decision with evidence, the pending approval.
        driver.get(f"{url}/ui/#/control")
        section = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, f'section.agent[data-agent="{AGENT}"]')))
        assert "memory from recorded failures" in section.text and "awaiting_approval" in section.text
        # Approve the pending decision: confirmed in a dialog, then a canary starts, audited.
        section.find_element(By.XPATH, ".//button[text()='Approve']").click()
        wait.until(ec.alert_is_present()).accept()
        wait.until(lambda d: d.find_elements(By.XPATH, "//button[text()='Roll back']"))
        row = driver.find_element(By.CSS_SELECTOR, f'tr[data-decision="{data["approval"]}"]')
        assert "canary" in row.text and not row.find_elements(By.XPATH, ".//button")
        with admin(url) as client:
            audit = client.get("/v1/admin/audit", params={"action": "control_action"}).json()["data"]
        assert f"approve:{data['approval']}" in {e["target"] for e in audit}
        section = driver.find_element(By.CSS_SELECTOR, f'section.agent[data-agent="{AGENT}"]')
        section.find_element(By.XPATH, ".//summary[text()='diff from active']").click()
        assert "Be brief." in section.find_element(By.CSS_SELECTOR, ".version pre").text
        shot("control")
        # Learning: the chart and the before/after of the decision.
        driver.get(f"{url}/ui/#/learning")
        learning = wait.until(
            ec.presence_of_element_located((By.CSS_SELECTOR, f'section.learning[data-agent="{AGENT}"]'))
        )
        wait.until(lambda d: learning.find_elements(By.CSS_SELECTOR, ".uplot canvas"))
        assert "effective" in learning.text and "6/7" in learning.text
        shot("learning")
        driver.get(f"{url}/ui/#/governance")
        wait.until(ec.text_to_be_present_in_element((By.ID, "tenants"), "globex"))
        shot("governance")
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == [], errors

        # A tenant key: only its own tenant's runs, no governance data.
        driver.find_element(By.ID, "logout").click()
        driver.get(f"{url}/ui/#/runs")
        log_in(wait, data["globex"])
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "tr[data-run]")))
        ids = {e.get_attribute("data-run") for e in driver.find_elements(By.CSS_SELECTOR, "tr[data-run]")}
        assert len(ids) == 1 and data["first"] not in driver.page_source and "acme" not in driver.page_source
        driver.get(f"{url}/ui/#/control")
        wait.until(ec.text_to_be_present_in_element((By.ID, "page"), "No agents visible"))
        assert "memory from recorded failures" not in driver.page_source
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == [], errors
    finally:
        driver.quit()


def test_a_page_left_while_loading_or_by_logout_polls_no_more(served: str, tmp_path: Path) -> None:
    """The runs list polls while shown. Left before its first load finished (a quick second navigation), its
    poller once outlived it, and after a logout kept asking with no key: the browser logged 401s."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    def runs_requests() -> int:
        names = driver.execute_script("return performance.getEntriesByType('resource').map((e) => e.name)")
        return sum("/v1/dashboard/runs" in name for name in names)

    driver = chrome(tmp_path / "chromium-profile")
    wait = WebDriverWait(driver, 30)
    try:
        driver.get(f"{served}/ui/#/control")
        log_in(wait, ADMIN_KEY)
        driver.execute_script("performance.setResourceTimingBufferSize(10000)")
        for i in range(3):  # the runs page, replaced by the control page before its first request is answered
            driver.execute_script(
                f"location.hash = '#/runs?agent=a{i}'; setTimeout(() => {{ location.hash = '#/control'; }}, 0)"
            )
            wait.until(lambda d: d.execute_script("return location.hash") == "#/control")
        wait.until(ec.text_to_be_present_in_element((By.ID, "page"), "Control"))
        time.sleep(0.5)
        left = runs_requests()
        assert left >= 1  # each runs page did ask once
        time.sleep(3.5)  # longer than the runs page's poll interval (3 s)
        assert runs_requests() == left, "a runs page polled after it was replaced"

        driver.get(f"{served}/ui/#/runs")
        wait.until(ec.presence_of_element_located((By.ID, "runs-status")))
        wait.until(ec.text_to_be_present_in_element((By.ID, "runs-status"), "live"))
        driver.find_element(By.ID, "logout").click()
        wait.until(ec.visibility_of_element_located((By.NAME, "key")))
        after_logout = runs_requests()
        time.sleep(3.5)
        assert runs_requests() == after_logout, "the runs page polled after the logout"
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == [], errors
    finally:
        driver.quit()
