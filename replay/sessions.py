"""Sessions in request logs: which requests are turns of one conversation, and the user's think time.

A replay that sends turn n+1 at its logged time may send it before reply n exists. To keep the
order a real conversation has, the pool marks each request with its session, its turn number and
the think time before it (see :mod:`loadgen.closedloop`, which sends turn n+1 only after reply n).

A session is found, in order of preference:

* an explicit id on the log line: ``conversation_id`` / ``session_id`` (top level, or in
  ``metadata``), else the request body's ``user`` field;
* otherwise the message history: turn n+1's messages start with turn n's messages followed by an
  assistant message (the reply), as chat clients resend the history.

Think time is the recorded gap between the end of the previous turn and this turn's arrival: the
previous arrival plus its logged latency when the log has one, else (no latency logged) the
arrival gap itself, an upper bound of the think time.

Requests are taken in arrival order (logs written at completion time may group a turn wrongly
only if a later turn was logged before its predecessor, which its content makes impossible).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
import orjson

_ID_FIELDS = ("conversation_id", "session_id")


def session_key(record: dict | None, body: dict) -> str | None:
    """The explicit session key of a log line, when it has one (None: find it by message prefix)."""
    for holder in (record or {}, (record or {}).get("metadata"), body.get("metadata")):
        if isinstance(holder, dict):
            for name in _ID_FIELDS:
                value = holder.get(name)
                if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
                    return f"{name}:{value}"
    user = body.get("user")
    if isinstance(user, str) and user:
        return f"user:{user}"
    return None


def _prefix_digests(messages: list) -> list[bytes]:
    """digests[k] identifies messages[:k] (k = 0..len): one pass, each message serialised once."""
    h = hashlib.sha1()
    out = [h.digest()]
    for m in messages:
        data = orjson.dumps(m, option=orjson.OPT_SORT_KEYS)
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
        out.append(h.digest())
    return out


@dataclass
class _Session:
    sid: str
    turns: int
    last_arrival: float
    last_end: float | None


@dataclass
class SessionTracker:
    """Assigns requests, fed in arrival order, to sessions; memory grows with open sessions only
    (a message-history session is keyed by its latest turn's history, which the next turn extends)."""

    by_key: dict[str, _Session] = field(default_factory=dict)
    # history digest -> sessions whose latest turn had exactly that history (oldest first: two
    # conversations that began alike are told apart by arrival order until their replies differ)
    by_prefix: dict[bytes, list[_Session]] = field(default_factory=dict)
    count: int = 0

    def add(
        self, arrival_s: float, body: dict, key: str | None = None, latency_s: float | None = None
    ) -> tuple[str, int, float | None]:
        """(session id, turn number from 0, think time before this turn in seconds; None for turn 0)."""
        messages = body.get("messages") if isinstance(body.get("messages"), list) else []
        session = None
        digests = None
        if key is not None:
            session = self.by_key.get(key)
        else:
            digests = _prefix_digests(messages)
            for k in range(len(messages) - 1, 0, -1):  # the longest earlier turn this one extends
                if isinstance(messages[k], dict) and messages[k].get("role") == "assistant":
                    waiting = self.by_prefix.get(digests[k])
                    if waiting:
                        session = waiting.pop(0)
                        if not waiting:
                            del self.by_prefix[digests[k]]
                        break
        think = None
        if session is None:
            session = _Session(f"s{self.count:07d}", 0, arrival_s, None)
            self.count += 1
        else:
            think = max(0.0, arrival_s - (session.last_end if session.last_end is not None else session.last_arrival))
            session.turns += 1
        session.last_arrival = arrival_s
        session.last_end = arrival_s + latency_s if latency_s is not None else None
        if key is not None:
            self.by_key[key] = session
        else:
            self.by_prefix.setdefault(digests[-1], []).append(session)
        return session.sid, session.turns, think


def session_shape(session_ids, think_s) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(turns per session, think times of later turns) of a pool or log; (None, None) when every
    session has a single turn (a trace without sessions: nothing to compare)."""
    if session_ids is None or len(session_ids) == 0:
        return None, None
    ids = np.asarray(session_ids)
    _, counts = np.unique(ids if ids.dtype.kind in "iu" else ids.astype(str), return_counts=True)
    if counts.max() <= 1:
        return None, None
    think = np.asarray(think_s, dtype=np.float64)  # None / NaN: a session's first turn
    think = think[~np.isnan(think)]
    return counts.astype(np.int64), think
