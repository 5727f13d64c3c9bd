#!/usr/bin/python3
"""tests/service/notebooks/browser_e2e.py - a notebook instance in a real
headless browser (Debian's chromium + chromedriver, python3-selenium), run by
it_notebooks_browser.sh against a real kilnd with a tokens file and an ACTIVE
instance nb1 of project p1.

Signs in to the dashboard, finds nb1 on the Notebooks page with its GPUs,
opens JupyterLab through the link (a new tab: kilnd's sign-in cookie, no
Authorization header), waits for JupyterLab's shell to render through the
proxy, then from that page runs a cell over the kernel's WebSocket and reads
a file over REST, as JupyterLab itself does. Without the cookie the same
calls get 401. Prints one line per failed check and "N passed, N failed".

usage: browser_e2e.py URL TOKEN SHOTS_DIR
"""
import os
import sys

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

URL, TOKEN, SHOTS = sys.argv[1], sys.argv[2], sys.argv[3]
passes = fails = 0


def check(what, ok, detail=""):
    global passes, fails
    if ok:
        passes += 1
    else:
        fails += 1
        print(f"FAIL: {what}{': ' + str(detail) if detail else ''}", flush=True)
    return ok


opts = webdriver.ChromeOptions()
opts.binary_location = "/usr/bin/chromium"
for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
          "--window-size=1280,1000"):
    opts.add_argument(a)
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
driver.set_script_timeout(60)

# from a page of JupyterLab: a kernel over REST, one cell over its WebSocket
RUN_CELL = r"""
const done = arguments[arguments.length - 1];
const base = arguments[0], code = arguments[1];
(async () => {
  const k = await fetch(base + 'api/kernels', {method: 'POST', body: '{"name":"python3"}'});
  if (k.status !== 201 && k.status !== 200) return done('kernel: HTTP ' + k.status);
  const id = (await k.json()).id;
  const ws = new WebSocket(base.replace(/^http/, 'ws') + 'api/kernels/' + id + '/channels');
  const msgId = 'm' + Date.now();
  let out = '';
  ws.onerror = () => done('websocket error');
  ws.onopen = () => ws.send(JSON.stringify({header: {msg_id: msgId, username: 'kiln',
    session: 's' + Date.now(), msg_type: 'execute_request', version: '5.3', date: ''},
    parent_header: {}, metadata: {}, channel: 'shell',
    content: {code: code, silent: false, store_history: false, user_expressions: {},
              allow_stdin: false, stop_on_error: true}}));
  ws.onmessage = (e) => {
    const m = JSON.parse(e.data);
    if (!m.parent_header || m.parent_header.msg_id !== msgId) return;
    if (m.msg_type === 'stream') out += m.content.text;
    if (m.msg_type === 'error') { ws.close(); done('error: ' + m.content.evalue); }
    if (m.msg_type === 'status' && m.content.execution_state === 'idle') { ws.close(); done(out); }
  };
})().catch((e) => done('exception: ' + e));
"""
STATUS_OF = r"""
const done = arguments[arguments.length - 1];
fetch(arguments[0]).then((r) => done(r.status)).catch((e) => done('exception: ' + e));
"""

try:
    driver.get(URL + "/")
    WebDriverWait(driver, 20).until(lambda d: d.find_element(By.ID, "token").is_displayed())
    driver.find_element(By.ID, "token").send_keys(TOKEN)
    driver.find_element(By.ID, "login-project").clear()
    driver.find_element(By.ID, "login-project").send_keys("p1")
    driver.find_element(By.ID, "login-submit").click()
    driver.get(URL + "/#/notebooks")
    row = 'tr[data-notebook="nb1"]'
    WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, row + " a.open-lab"))
    cells = driver.find_element(By.CSS_SELECTOR, row).text
    check("the Notebooks page lists nb1 ACTIVE with its GPUs", "ACTIVE" in cells and
          "2 × NVIDIA_TESLA_T4" in cells and "held: GPU 0, 1" in cells, cells)
    driver.save_screenshot(os.path.join(SHOTS, "notebooks.png"))
    first = driver.current_window_handle
    driver.find_element(By.CSS_SELECTOR, row + " a.open-lab").click()
    WebDriverWait(driver, 20).until(lambda d: len(d.window_handles) > 1)
    driver.switch_to.window([w for w in driver.window_handles if w != first][0])
    base = URL + "/notebooks/p1/nb1/"
    WebDriverWait(driver, 20).until(lambda d: d.current_url.startswith(base))
    # JupyterLab's shell: its whole frontend came through the proxy
    ok = True
    try:
        WebDriverWait(driver, 90).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, "#jp-main-dock-panel, .jp-LabShell"))
    except Exception as e:  # noqa: BLE001 - the check reports it
        ok = False
    check("JupyterLab renders through kilnd's proxy", ok, driver.title)
    driver.save_screenshot(os.path.join(SHOTS, "jupyterlab.png"))
    cookies = {c["name"]: c for c in driver.get_cookies()}
    check("the sign-in cookie is HttpOnly", cookies.get("kiln_token", {}).get("httpOnly") is True,
          cookies.get("kiln_token"))
    out = driver.execute_async_script(
        RUN_CELL, base, "import os; print(os.environ['CUDA_VISIBLE_DEVICES'], 6*7)")
    check("a cell runs over the kernel WebSocket from the browser", out == "0,1 42\n", out)
    check("the page cannot read the kiln token",
          "kiln_token" not in driver.execute_script("return document.cookie"))
    st = driver.execute_async_script(STATUS_OF, base + "api/contents/browser.txt")
    check("REST from the page", st in (200, 404), st)
    driver.delete_all_cookies()
    st = driver.execute_async_script(STATUS_OF, base + "api/status")
    check("without the cookie: 401", st == 401, st)
finally:
    driver.quit()
print(f"{passes} passed, {fails} failed")
sys.exit(1 if fails else 0)
