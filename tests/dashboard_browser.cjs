// The dashboard in Debian's Chromium, driven by playwright-core. Prints one
// JSON line of what the page showed.
//   node dashboard_browser.cjs PLAYWRIGHT_DIR BASE_URL KEY MODEL SCREENSHOT_DIR
// Without the key the page must be refused; with it (a browser login whose
// password is the key): the model is seen, loaded with the Load button, then
// unloaded with the Unload button, and the state and bytes on the page follow.
const { chromium } = require(process.argv[2]);
const [base, key, model, shots] = process.argv.slice(3);
const path = require('path');

const row = `tr[data-model="${model}"]`;
const cell = (col) => `${row} td[data-col="${col}"]`;

async function main() {
  const out = {};
  const browser = await chromium.launch({
    executablePath: process.env.RECLAIM_CHROMIUM || '/usr/bin/chromium',
    // As root in a container, Chromium's sandbox cannot start.
    args: ['--no-sandbox', '--disable-dev-shm-usage'],
  });
  try {
    // No key, then a wrong one: the page itself is refused.
    for (const [name, creds] of [['no_key', undefined], ['wrong_key', { username: 'reclaim', password: key + 'x' }]]) {
      const ctx = await browser.newContext(creds ? { httpCredentials: creds } : {});
      const page = await ctx.newPage();
      const statuses = [];
      page.on('response', (resp) => { if (resp.url() === base + '/') statuses.push(resp.status()); });
      let error = '';
      let challenge = '';
      try {
        const r = await page.goto(base + '/');
        challenge = r.headers()['www-authenticate'] || '';
      } catch (e) {
        // Chromium answers the challenge with the wrong login once, then gives up.
        error = e.message.split('\n')[0];
      }
      out[name] = { statuses, error, challenge, models_table: error ? null : await page.$('#models') !== null };
      await ctx.close();
    }

    const ctx = await browser.newContext({ httpCredentials: { username: 'reclaim', password: key }, viewport: { width: 1400, height: 1000 } });
    const page = await ctx.newPage();
    const errors = [];
    page.on('pageerror', (e) => errors.push(e.message));
    page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
    const r = await page.goto(base + '/');
    out.status = r.status();
    await page.waitForSelector(`${row}[data-state="unloaded"]`, { timeout: 30000 });
    out.before = { state: await page.textContent(cell('state')), host: await page.textContent(cell('host')) };

    await page.click(`${row} button[data-action="load"]`);
    await page.waitForSelector(`${row}[data-state="loaded"]`, { timeout: 60000 });
    // The ledger's model owner appears, and the chart gets the load's marker.
    await page.waitForFunction((m) => hist.events.some((e) => e.event === 'load' && e.model === m), model, { timeout: 30000 });
    await page.waitForSelector(`#ledger details[data-path$="/model:${model}"]`, { timeout: 30000 });
    out.loaded = {
      host: await page.textContent(cell('host')),
      verdict: await page.getAttribute('#verdict', 'data-verdict'),
      ledger_owner: await page.textContent(`#ledger details[data-path$="/model:${model}"] > summary .bytes`),
    };
    // The details walk the server's table of fields: each one the model has
    // is shown, under the name the table gives it.
    await page.click(`${row} button[data-action="details"]`);
    await page.waitForSelector(`tr[data-details-of="${model}"]:not([hidden]) dd[data-field="loads"]`, { timeout: 30000 });
    out.details = await page.$$eval(`tr[data-details-of="${model}"] dd`, (dds) => Object.fromEntries(dds.map((d) => [d.dataset.field, d.textContent])));
    await page.screenshot({ path: path.join(shots, 'dashboard-loaded.png'), fullPage: true });
    await page.click(`${row} button[data-action="details"]`);
    await page.waitForSelector(`tr[data-details-of="${model}"][hidden]`, { state: 'attached', timeout: 30000 });

    await page.click(`${row} button[data-action="pin"]`);
    await page.waitForFunction((s) => document.querySelector(s).textContent.includes('pinned'), cell('name'), { timeout: 30000 });
    out.pinned = await page.textContent(cell('expires'));
    await page.click(`${row} button[data-action="unpin"]`);
    await page.waitForFunction((s) => !document.querySelector(s).textContent.includes('pinned'), cell('name'), { timeout: 30000 });

    await page.click(`${row} button[data-action="unload"]`);
    await page.waitForSelector(`${row}[data-state="unloaded"]`, { timeout: 60000 });
    await page.waitForFunction((m) => hist.events.some((e) => e.event === 'unload' && e.model === m), model, { timeout: 30000 });
    // The residue is judged once the ledger is back to the start; it must
    // turn green (the test fails with what the page said if it does not).
    await page.waitForFunction(() => document.querySelector('#verdict').dataset.verdict !== 'holding', null, { timeout: 60000 });
    out.first_verdict = await page.textContent('#residue-note');
    await page.waitForFunction(() => document.querySelector('#verdict').dataset.verdict === 'clean', null, { timeout: 30000 })
      .catch(() => {});
    out.residue_note = await page.textContent('#residue-note');
    out.unloaded = {
      state: await page.textContent(cell('state')),
      host: await page.textContent(cell('host')),
      device: await page.textContent(cell('device')),
      verdict: await page.getAttribute('#verdict', 'data-verdict'),
      ledger_owner: await page.$(`#ledger details[data-path$="/model:${model}"]`) !== null,
      chart_points: await page.evaluate(() => hist.t.length),
    };
    // The chart's last sample is after the unload: the ledger's line is down.
    await page.waitForFunction(() => hist.ledger_host.length > 0 && hist.ledger_host[hist.ledger_host.length - 1] === 0, null, { timeout: 30000 });
    await page.screenshot({ path: path.join(shots, 'dashboard-unloaded.png'), fullPage: true });
    out.errors = errors;
    await ctx.close();
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(out));
}

main().catch((e) => { console.error(e); process.exit(1); });
