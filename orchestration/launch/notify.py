"""``--notify URL``: a webhook told when a sweep finishes or fails and when a trial has exhausted its retries.

The body is Slack's incoming-webhook JSON, ``{"text": "..."}`` (Mattermost, Rocket.Chat, Discord's ``/slack``
endpoint and Teams' workflow webhooks take the same). Messages are posted by one background thread, in order, each
with a :data:`TIMEOUT_S` timeout: a webhook that fails or hangs never stops or slows the sweep; it costs one warning
line per failed message; a webhook that moved gets the same POST at its new address. At the end of the launch
:meth:`Notifier.close` waits at most :data:`TIMEOUT_S` for the last message (the one that says how the sweep ended)
before the driver exits.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import urllib.error
import urllib.request
from typing import Any

__all__ = ["Notifier", "check_url", "TIMEOUT_S", "sweep_text", "trial_text", "notify_ended"]

TIMEOUT_S = 10.0
_STOP = object()


def check_url(url: str) -> str:
    """``url`` if it is an http(s) URL; else ValueError naming the flag and what is allowed."""
    if not url.startswith(("https://", "http://")) or len(url.split("://", 1)[1]) < 1:
        raise ValueError(f"--notify {url!r}: must be an http:// or https:// webhook URL that takes Slack-compatible "
                         "JSON ({\"text\": ...}), e.g. https://hooks.slack.com/services/...")
    return url


class _PostAgain(urllib.request.HTTPRedirectHandler):
    """A webhook that moved (301, 302, 307, 308) gets the same POST at its new address: urllib would follow a 301
    or 302 as a GET without the body (a browser's habit), losing the message while the GET's 200 counted it sent
    (adversarial finding #21), and would not follow a 307 or 308 to a POST at all. Loops and more than urllib's 10
    hops still fail."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: PLR0913 - urllib's signature
        if code not in (301, 302, 307, 308) or not newurl.startswith(("http://", "https://")):
            return None     # urllib then raises the answer as an HTTPError: said, not counted
        return urllib.request.Request(newurl, data=req.data, method="POST", headers=dict(req.headers),
                                      origin_req_host=req.origin_req_host, unverifiable=True)


_OPENER = urllib.request.build_opener(_PostAgain)


class Notifier:
    """Posts ``{"text": ...}`` to ``url`` from a daemon thread; ``url`` None: every call does nothing."""

    def __init__(self, url: str | None, timeout_s: float = TIMEOUT_S):
        self.url, self.timeout_s = url, timeout_s
        self.sent = 0       # messages the webhook accepted (a 2xx answer)
        self._queue: queue.Queue[Any] = queue.Queue()
        self._thread: threading.Thread | None = None
        if url:
            self._thread = threading.Thread(target=self._post_all, name="sweep-notify", daemon=True)
            self._thread.start()

    def send(self, text: str) -> None:
        """Queue ``text``; returns at once."""
        if self._thread is not None:
            self._queue.put(text)

    def close(self) -> None:
        """Let the queued messages go out, waiting at most the timeout (the thread is a daemon: never longer)."""
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join(self.timeout_s)
            self._thread = None

    def _post_all(self) -> None:
        while (text := self._queue.get()) is not _STOP:
            self._post(text)

    def _post(self, text: str) -> None:
        body = json.dumps({"text": text}).encode()
        request = urllib.request.Request(self.url, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with _OPENER.open(request, timeout=self.timeout_s) as answer:
                answer.read()
            self.sent += 1
        except urllib.error.HTTPError as e:
            if e.code == 303:   # "see other": the POST was handled and the answer is elsewhere (RFC 9110 15.4.4)
                self.sent += 1
                return
            where = f" at {e.url}" if e.url and e.url != self.url else ""  # after a redirect: where it ended
            self._warn(f"HTTPError: HTTP {e.code} {e.reason}{where}")
        except (urllib.error.URLError, OSError, ValueError) as e:  # a timeout is an OSError
            self._warn(f"{type(e).__name__}: {getattr(e, 'reason', None) or e}")

    @staticmethod
    def _warn(why: str) -> None:
        print(f"warning: --notify: the webhook did not take the message ({why}); the sweep goes on", file=sys.stderr,
              flush=True)


def sweep_text(status: str, exp_name: str, launch_id: str | None, counts: dict[str, int], resume: str | None,
               error: str | None = None) -> str:
    """One message for the end of a launch: how it ended, what finished, and how to go on."""
    done = ", ".join(f"{n} {what}" for what, n in counts.items() if n)
    text = f"mutexmatch sweep {exp_name!r} (launch {launch_id or '-'}) {status}" + (f": {done}" if done else "")
    if error:
        text += f"\nerror: {error}"
    if resume:
        text += f"\nto continue it: {resume}"
    return text


def trial_text(exp_name: str, trial: str, retries: int, error: str) -> str:
    """One message for a trial that failed and has no retry left."""
    tries = "no retry" if retries == 0 else f"{retries} retr{'y' if retries == 1 else 'ies'}"
    return f"mutexmatch sweep {exp_name!r}: trial {trial} failed after {tries}: {error}"


def notify_ended(notifier: Notifier | None, *, status: str, exp_name: str, launch_id: str | None,
                 outcome: Any = None, resume: str | None = None, error: BaseException | None = None) -> None:
    """The end-of-launch message (``outcome``: a :class:`~orchestration.launch.launch.SweepOutcome`), then the
    notifier closed (the message given at most :data:`TIMEOUT_S` to go out)."""
    if notifier is None:
        return
    counts = {} if outcome is None else {"finished": len(outcome.finished), "failed": len(outcome.failed),
                                         "not finished": len(outcome.not_finished),
                                         "skipped": len(outcome.skipped)}
    why = None if error is None else (f"{type(error).__name__}: {error}"[:500])
    notifier.send(sweep_text(status, exp_name, launch_id, counts, None if status == "finished" else resume, why))
    notifier.close()
