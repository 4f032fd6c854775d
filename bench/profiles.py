"""Benchmark 6c: named profiles (app/profiles). A cloud_browser task's start, claimed → first page requested, with a
profile of 1 MB and of 50 MB against none, pooled and cold; and the time its end takes to save such a profile (read
from the browser, sealed, one UPDATE), from the trace's entry. The profiles are seeded in the database as a persist
task leaves them: a few cookies, localStorage, and IndexedDB records for the pages' origin."""
import os
import time

from bench import browser, common, pool
from bench.common import Row
from app.crypto import seal
from app.profiles import state as profile_state

SECTION = "6c profiles"
RUNS = common.scaled(3, 2)  # tasks per (profile size, pooled or cold); sizes interleaved so noise falls on all
SAVE_RUNS = common.scaled(2, 1)
SIZES = {"1 MB": 1_000_000, "50 MB": 50_000_000}
RECORD = 64 * 1024  # characters of one IndexedDB record
LOCAL_STORAGE = 2_000_000  # at most this much of a profile is localStorage (Chromium allows 10 MB per origin)


def profile(origin, size):
    """A state of about `size` bytes for `origin`: 3 cookies, localStorage (up to half of it), the rest IndexedDB
    records of 64 KiB (what a mail or chat client's offline cache looks like)."""
    host = origin.split("://", 1)[1].split(":")[0]
    cookies = [{"name": f"c{n}", "value": os.urandom(32).hex(), "domain": host, "path": "/", "secure": False,
                "httpOnly": n == 0, "sameSite": "Lax", "session": False, "expires": time.time() + 86400}
               for n in range(3)]
    local = min(size // 2, LOCAL_STORAGE)
    items = [[f"k{n}", os.urandom(RECORD // 2).hex()] for n in range(max(1, local // RECORD))]
    records = [[n, {"id": n, "body": os.urandom(RECORD // 2).hex(), "at": {"$rd:t": "Date", "v": 1767225600000}}]
               for n in range(max(1, (size - local) // RECORD))]
    store = {"name": "messages", "keyPath": "id", "autoIncrement": False, "skipped": 0, "records": records,
             "indexes": [{"name": "at", "keyPath": "at", "unique": False, "multiEntry": False}]}
    return {"cookies": cookies, "localStorage": {origin: items},
            "indexedDB": {origin: [{"name": "mail", "version": 1, "stores": [store]}]}}


def seed(stack, name, state):
    """The bench key's profile `name` holds `state` (created or replaced); its size as saved."""
    size = profile_state.size(state)
    stack.sql("INSERT INTO profiles (api_key_id, name, state_sealed, size_bytes) "
              "SELECT id, :name, :sealed, :size FROM api_keys LIMIT 1 ON CONFLICT (api_key_id, name) "
              "DO UPDATE SET state_sealed = :sealed, size_bytes = :size, writer = NULL",
              name=name, sealed=seal(state), size=size)
    return size


def starts(stack, pages, pooled):
    """claimed → first page (ms) per profile (None: no profile), RUNS tasks each, on a worker of its own; and per
    profile why the tasks that failed did (a 50 MB profile can take a page past its load timeout)."""
    worker = pool.worker(stack, f"profiles-{'pool' if pooled else 'cold'}-worker", pool.POOL_SIZE if pooled else 0)
    try:
        times, failures = {None: [], **{label: [] for label in SIZES}}, {}
        pool.first_page(stack, pages)  # warm-up: imports, disk cache
        for _ in range(RUNS):
            for label in times:
                if pooled:
                    pool.wait_pool_full()  # the steady state the pool is for: a ready browser waits
                extra = {"profile": {"name": label.replace(" ", "")}} if label else {}
                try:
                    times[label].append(pool.first_page(stack, pages, **extra) * 1000)
                except RuntimeError as error:
                    failures.setdefault(label, []).append(str(error)[:120])
        return times, failures
    finally:
        stack.stop(worker)


def save(stack, pages, name, state):
    """One persist task ending with `state` in its browser: (ms its save took, bytes seeded, bytes saved)."""
    seeded = seed(stack, name, state)
    request_id = browser.submit_task(stack, pool.PROMPT.format(base=pages.base),
                                     profile={"name": name, "persist": True})
    stack.wait_finished([request_id], 300)
    reply = common.http().get(f"{stack.web.url}/fast/v2/remote-dispatch/responses/{request_id}",
                              headers={"x-api-key": stack.api_key}, timeout=60).json()
    entry = next((e for e in (reply.get("response") or {}).get("actionTrace") or []
                  if e["action"].startswith((f"profile '{name}' saved", f"profile '{name}' not saved"))), None)
    if reply.get("status") != "success" or entry is None or " not saved" in entry["action"]:
        raise RuntimeError(f"the persist task did not save its profile: {reply.get('status')}: "
                           f"{entry and entry['action'] or reply.get('error') or reply}"[:400])
    saved = stack.sql("SELECT size_bytes FROM profiles WHERE name = :name", name=name)[0][0]
    return entry["durationMs"], seeded, saved


def measure(stack):
    pages = browser.PageServer()
    try:
        states = {label: profile(pages.base, size) for label, size in SIZES.items()}
        sizes = {label: seed(stack, label.replace(" ", ""), state) for label, state in states.items()}
        (cold, cold_failed), (pooled, pooled_failed) = starts(stack, pages, False), starts(stack, pages, True)
        # The cap raised for the save: 50 MB is over PROFILE_MAX_BYTES's default (20 MiB).
        worker = pool.worker(stack, "profiles-save-worker", 0, PROFILE_MAX_BYTES=str(2 * max(SIZES.values())))
        try:
            saves, saves_failed = {label: [] for label in SIZES}, {}
            for label, state in states.items():
                for _ in range(SAVE_RUNS):
                    try:
                        saves[label].append(save(stack, pages, f"save-{label.replace(' ', '')}", state))
                    except RuntimeError as error:
                        saves_failed.setdefault(label, []).append(str(error)[:160])
        finally:
            stack.stop(worker)
    finally:
        pages.close()
    what = "start: cloud_browser task claimed → first page requested"
    rows = []
    for label in SIZES:
        note = f"{sizes[label]:,} bytes as saved"
        for way, times, failed in (("cold", cold, cold_failed), ("pooled", pooled, pooled_failed)):
            rows += common.latency_rows(SECTION, f"{what}, {way}, {label} profile", times[label],
                                        f"the same, {way}, no profile", times[None])
            if failed.get(label):
                rows[-2].note = f"{len(failed[label])} of {RUNS} failed: {failed[label][0]}"
        rows[-4].note = rows[-4].note or note
        kept = [saved for _, _, saved in saves[label]]
        said = f"saved {min(kept):,}..{max(kept):,} of {saves[label][0][1]:,} bytes" if kept else ""
        if saves_failed.get(label):
            said += f"; {len(saves_failed[label])} of {SAVE_RUNS} failed: {saves_failed[label][0]}"
        rows.append(Row(SECTION, f"save of a {label} profile at the task's end, p50 (ms)",
                        common.percentile([ms for ms, _, _ in saves[label]], 50),
                        "a task's start, cold, no profile (p50)", common.percentile(cold[None], 50), said))
    return rows


if __name__ == "__main__":
    common.main(measure)
