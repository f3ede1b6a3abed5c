"""The operator console in a real browser: Debian's Chromium driven by Playwright.

    python tests/browser/console.py BROKER_URL DATABASE_URL OUT_DIR

Seeds a queue over the API (messages, a consumer group, two dead letters), files a
history snapshot, then loads every console view in headless Chromium, saves a
screenshot of each into OUT_DIR, clicks Redrive and Delete on the dead letters and checks
in the database (psql) that each did what it says. Prints `test browser::NAME ... ok`
lines and writes OUT_DIR/timings.json (each view's navigation time, ms).
"""

import json
import os
import subprocess
import sys
import time
import traceback
import urllib.request
import uuid

from playwright.sync_api import sync_playwright

BROKER, DB, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
CHROMIUM = os.environ.get("QUEEN_CHROMIUM", "/usr/bin/chromium")
QUEUE = "browser-" + uuid.uuid4().hex[:12]
results = []


def api(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BROKER + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        text = r.read().decode()
        return r.status, (json.loads(text) if text else None)


def sql(query):
    out = subprocess.run(["psql", DB, "-Atqc", query], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def dlq_rows():
    return int(sql(
        "SELECT count(*) FROM queen.log_dlq d JOIN queen.log_partitions p ON p.id = d.partition_id "
        f"JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = '{QUEUE}'"))


def check(name, fn):
    try:
        fn()
        print(f"test browser::{name} ... ok", flush=True)
        results.append(True)
    except Exception:
        print(f"test browser::{name} ... FAILED", flush=True)
        traceback.print_exc()
        results.append(False)


def seed():
    api("POST", "/api/v1/configure", {"queue": QUEUE, "options": {"leaseTime": 60, "retryLimit": 0}})
    items = [{"queue": QUEUE, "partition": f"p{i % 2}", "transactionId": f"b{i}",
              "payload": {"order": i, "note": "browser test"}} for i in range(20)]
    api("POST", "/api/v1/push", {"items": items})
    for _ in range(2):
        s, pop = api("GET", f"/api/v1/pop/queue/{QUEUE}?consumerGroup=billing&batch=1")
        assert s == 200, s
        m = pop["messages"][0]
        api("POST", "/api/v1/ack/batch", {"consumerGroup": "billing", "acknowledgments": [
            {"transactionId": m["transactionId"], "partitionId": pop["partitionId"],
             "leaseId": pop["leaseId"], "status": "failed", "error": "card declined"}]})
    s, pop = api("GET", f"/api/v1/pop/queue/{QUEUE}?batch=5")
    acks = [{"transactionId": m["transactionId"], "partitionId": pop["partitionId"],
             "leaseId": pop["leaseId"], "status": "completed"} for m in pop["messages"]]
    api("POST", "/api/v1/ack/batch", {"acknowledgments": acks})
    time.sleep(1.2)  # two samples of the broker's counters (QUEEN_HISTORY_SAMPLE_MS=500)
    api("POST", "/api/v1/stats/refresh", {})
    assert dlq_rows() == 2, dlq_rows()


def main():
    os.makedirs(OUT, exist_ok=True)
    check("seed", seed)
    timings = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 860})
        page.on("dialog", lambda d: d.accept())

        def view(name, path, expect):
            def run():
                page.goto(BROKER + path)
                page.wait_for_load_state("load")
                nav = page.evaluate("performance.getEntriesByType('navigation')[0].duration")
                timings[name] = round(nav, 1)
                body = page.inner_text("main")
                for e in expect:
                    assert e in body, f"{path}: {e!r} not in the page"
                page.screenshot(path=os.path.join(OUT, f"console-{name}.png"), full_page=True)
            check(f"view_{name}", run)

        view("queues", "/console/queues", [QUEUE])
        view("queue", f"/console/queues/{QUEUE}", ["Options in force", "p0", "p1", "billing"])
        view("groups", "/console/groups", ["billing", QUEUE])
        view("dlq", f"/console/dlq?queue={QUEUE}", ["card declined", "browser test"])
        view("throughput", "/console/throughput", ["pushed", "acked"])
        view("lifecycle", "/console/lifecycle", ["Storage per queue", QUEUE])
        view("maintenance", "/console/maintenance", ["push maintenance", "pop maintenance"])

        def redrive():
            page.goto(BROKER + f"/console/dlq?queue={QUEUE}")
            page.locator("article.dlq button", has_text="Redrive").first.click()
            page.wait_for_url("**/console/dlq?notice=**")
            assert "moved" in page.inner_text(".notice"), page.inner_text(".notice")
            assert dlq_rows() == 1, dlq_rows()
        check("click_redrive", redrive)

        def delete():
            page.locator("article.dlq button", has_text="Delete").first.click()
            page.wait_for_url("**/console/dlq?notice=**")
            assert "Deleted 1" in page.inner_text(".notice"), page.inner_text(".notice")
            assert dlq_rows() == 0, dlq_rows()
            page.screenshot(path=os.path.join(OUT, "console-dlq-after.png"), full_page=True)
        check("click_delete", delete)
        browser.close()
    with open(os.path.join(OUT, "timings.json"), "w") as f:
        json.dump(timings, f, indent=1)
    print("console navigation ms: " + ", ".join(f"{k} {v}" for k, v in timings.items()))
    api("DELETE", f"/api/v1/resources/queues/{QUEUE}")
    sys.exit(0 if all(results) else 1)


main()
