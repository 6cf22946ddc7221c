"""``--notify URL`` (issue 31): Slack-compatible JSON posted to a webhook, here a local HTTP server on 127.0.0.1 in a
thread; a failing or slow webhook costs one warning line and never holds the caller up."""

from __future__ import annotations

import http.server
import json
import threading
import time
from types import SimpleNamespace

import pytest

from orchestration.launch.notify import Notifier, check_url, notify_ended, trial_text


class _Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        moved = self.server.moved.get(self.path)        # path → (status, Location): a webhook that redirects
        if moved is None:
            self.server.received.append((self.headers["Content-Type"], json.loads(body)))
        time.sleep(self.server.delay)
        self.send_response(moved[0] if moved else self.server.status)
        if moved:
            self.send_header("Location", moved[1])
        self.end_headers()
        self.wfile.write(b"ok")

    def do_GET(self):  # noqa: N802 - a redirect followed as a GET loses the message
        self.server.gets.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):  # quiet
        pass


@pytest.fixture
def webhook():
    """``(url, server)``: a webhook on 127.0.0.1 that records what it gets (``server.status``, ``server.delay``)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    server.received, server.status, server.delay, server.moved, server.gets = [], 200, 0.0, {}, []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", server
    server.shutdown()
    server.server_close()


def test_the_messages_arrive_as_slack_json_in_order(webhook):
    url, server = webhook
    notifier = Notifier(url)
    notifier.send("first")
    notifier.send(trial_text("tiny", "run_trial_abc_00001 (phase grid)", 2, "ValueError: boom"))
    outcome = SimpleNamespace(finished=["a", "b"], failed=[], not_finished=[], skipped=["c"])
    notify_ended(notifier, status="finished", exp_name="tiny", launch_id="20261127-1", outcome=outcome,
                 resume="python -m orchestration.sweep tiny.yaml --resume")
    assert notifier.sent == 3
    assert [ctype for ctype, _ in server.received] == ["application/json"] * 3
    texts = [body["text"] for _, body in server.received]
    assert texts[0] == "first"
    assert texts[1] == ("mutexmatch sweep 'tiny': trial run_trial_abc_00001 (phase grid) failed after 2 retries: "
                        "ValueError: boom")
    # a finished sweep: no resume command; counts that are zero are left out
    assert texts[2] == "mutexmatch sweep 'tiny' (launch 20261127-1) finished: 2 finished, 1 skipped"


def test_a_failed_sweep_says_the_error_and_how_to_continue(webhook):
    url, server = webhook
    notify_ended(Notifier(url), status="failed", exp_name="tiny", launch_id="L", resume="python -m x --resume",
                 error=RuntimeError("the cluster went away"))
    assert server.received[0][1]["text"] == ("mutexmatch sweep 'tiny' (launch L) failed\nerror: RuntimeError: the "
                                             "cluster went away\nto continue it: python -m x --resume")


def test_a_slow_webhook_never_holds_the_sweep_and_costs_one_warning_line(webhook, capsys):
    url, server = webhook
    server.delay = 3.0
    notifier = Notifier(url, timeout_s=0.5)
    t0 = time.perf_counter()
    notifier.send("slow")
    sent_s = time.perf_counter() - t0
    thread = notifier._thread
    notifier.close()  # waits for the message at most the timeout
    closed_s = time.perf_counter() - t0
    thread.join(5)  # the test (not the sweep) waits for the message's own timeout to end it
    assert sent_s < 0.05 and closed_s < 2.0, (sent_s, closed_s)
    warnings = [ln for ln in capsys.readouterr().err.splitlines() if ln]
    assert len(warnings) == 1 and warnings[0].startswith("warning: --notify: the webhook did not take the message")
    assert "the sweep goes on" in warnings[0] and notifier.sent == 0


def test_a_failing_webhook_is_one_warning_line_per_message(webhook, capsys):
    url, server = webhook
    server.status = 500
    notifier = Notifier(url)
    notifier.send("a")
    notifier.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "HTTPError" in err[0] and "500" in err[0], err
    unreachable = Notifier("http://127.0.0.1:9/nothing-listens", timeout_s=1.0)
    unreachable.send("b")
    unreachable.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: --notify:"), err


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirecting_webhook_gets_the_message_posted_at_its_new_address(webhook, status):
    """Adversarial finding #21: urllib follows a 301/302 to a POST as a GET without the body, so the message was
    lost and still counted as sent (and a 307/308 not at all)."""
    url, server = webhook
    server.moved = {"/hook": (status, "/new-hook")}
    notifier = Notifier(url)
    notifier.send("moved")
    notifier.close()
    assert server.received == [("application/json", {"text": "moved"})] and server.gets == []
    assert notifier.sent == 1


def test_a_see_other_answer_means_the_webhook_took_the_message(webhook, capsys):
    url, server = webhook
    server.moved = {"/hook": (303, "/receipt")}
    notifier = Notifier(url)
    notifier.send("taken")
    notifier.close()
    assert notifier.sent == 1 and server.gets == [] and capsys.readouterr().err == ""


def test_a_redirect_that_ends_nowhere_is_said_and_not_counted(webhook, capsys):
    url, server = webhook
    server.moved = {"/hook": (302, "/gone"), "/gone": (404, "")}
    notifier = Notifier(url)
    notifier.send("lost")
    notifier.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert notifier.sent == 0 and server.gets == []
    assert len(err) == 1 and err[0].startswith("warning: --notify: the webhook did not take the message"), err
    assert "404" in err[0] and "/gone" in err[0], err


def test_without_a_url_nothing_is_sent_or_started():
    notifier = Notifier(None)
    notifier.send("x")
    notifier.close()
    assert notifier.sent == 0 and notifier._thread is None
    notify_ended(None, status="finished", exp_name="x", launch_id=None)  # no notifier: nothing to do


@pytest.mark.parametrize("url", ["ftp://example.org/hook", "hooks.slack.com/services/x", "http://"])
def test_a_url_that_is_no_webhook_is_refused_naming_the_flag(url):
    with pytest.raises(ValueError, match=r"^--notify '.*': must be an http:// or https:// webhook URL"):
        check_url(url)


def test_the_sweep_command_refuses_a_bad_url_and_accepts_unlimited_retries_before_any_work(tmp_path, capsys):
    from orchestration.launch.launch import SweepOptions, check_options
    from orchestration.sweep import main

    assert main([str(tmp_path / "missing.yaml"), "--notify", "ftp://x"]) == 2
    assert capsys.readouterr().err.strip() == ("error: --notify 'ftp://x': must be an http:// or https:// webhook "
                                               "URL that takes Slack-compatible JSON ({\"text\": ...}), e.g. "
                                               "https://hooks.slack.com/services/...")
    check_options(SweepOptions(spec_path=tmp_path / "x.yaml", max_failures=-1))  # Ray's -1: retry without end
    assert main([str(tmp_path / "x.yaml"), "--max-failures", "-2"]) == 2
    assert "--max-failures=-2: must be >= -1 (-1: retry without end, as Ray's -1)" in capsys.readouterr().err
