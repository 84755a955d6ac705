// End-to-end check of the outboxd console in headless Chromium: sign in,
// load every page, filter dead messages, retry all matching and watch the
// count fall to zero, pause and resume a route and the table, with no
// console error on any page. Run by
// console/e2e_test.go, which starts the console and seeds the table.
//
// Environment: CONSOLE_URL, CONSOLE_TOKEN, CONSOLE_TABLE, DEAD_EVENT (the
// event type to filter on), DEAD_MATCHING and DEAD_OTHER (the dead counts
// with and without that event type), HISTORY_ID (a message delivered at its
// fourth attempt), SCREENSHOTS (a directory, optional).
import { chromium } from 'playwright-core';
import path from 'node:path';

const env = (k) => { const v = process.env[k]; if (!v) throw new Error(`${k} is not set`); return v; };
const base = env('CONSOLE_URL'), token = env('CONSOLE_TOKEN'), table = env('CONSOLE_TABLE');
const deadEvent = env('DEAD_EVENT'), deadMatching = Number(env('DEAD_MATCHING')), deadOther = Number(env('DEAD_OTHER'));
const historyID = env('HISTORY_ID');
const shots = process.env.SCREENSHOTS || '';
const t = (p) => `${base}/t/${encodeURIComponent(table)}${p}`;

function check(cond, msg) { if (!cond) throw new Error('check failed: ' + msg); }

const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update'],
});
const problems = [];
const timings = {};
async function newPage(colorScheme) {
  const ctx = await browser.newContext({ viewport: { width: 1360, height: 860 }, colorScheme });
  const page = await ctx.newPage();
  page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning') problems.push(`${m.type()} on ${page.url()}: ${m.text()}`); });
  page.on('pageerror', (e) => problems.push(`page error on ${page.url()}: ${e.message}`));
  // A fetch cut short by a navigation (the page reloads when a job ends) is
  // not a failure.
  page.on('requestfailed', (r) => { if (r.failure()?.errorText !== 'net::ERR_ABORTED') problems.push(`request failed on ${page.url()}: ${r.url()} ${r.failure()?.errorText}`); });
  page.on('response', (r) => { if (r.status() >= 400) problems.push(`HTTP ${r.status()} on ${page.url()}: ${r.url()}`); });
  return page;
}
async function shot(page, name) {
  if (shots) await page.screenshot({ path: path.join(shots, name + '.png') });
}
async function visit(page, url, name) {
  const start = Date.now();
  const resp = await page.goto(url, { waitUntil: 'load' });
  timings[name] = Date.now() - start;
  check(resp.ok(), `${url} answered ${resp.status()}`);
}
async function signIn(page) {
  await page.goto(base + '/');
  check(page.url().includes('/login'), 'an unauthenticated visit goes to the sign-in form');
  await page.fill('input[name="token"]', token);
  await Promise.all([page.waitForURL((u) => !u.pathname.startsWith('/login')), page.click('button[type="submit"]')]);
}
const countOf = async (page) => Number(await page.getAttribute('#match-count', 'data-n'));

try {
  const page = await newPage('light');
  await signIn(page);

  // Overview: counts, and charts once the sampler has two samples.
  await visit(page, t('/'), 'overview');
  check(await page.textContent('h1') === 'Overview' || (await page.textContent('h1')).startsWith('Overview'), 'overview heading');
  check(Number((await page.textContent('[data-gauge="dead"]')).replace(/,/g, '')) === deadMatching + deadOther, 'dead card shows every dead message');
  await page.waitForSelector('.plot[data-series="dead"] svg path.line', { state: 'attached', timeout: 15000 });
  const axis = await page.locator('.plot[data-series="dead"] svg text').allTextContents();
  check(axis.some((x) => /^\d\d:\d\d:\d\dZ$/.test(x)), `chart times in UTC: ${axis}`);
  // The running dispatcher is listed, idle or busy, with its host.
  for (let i = 0; (await page.locator('#dispatchers tbody tr[data-owner]').count()) === 0; i++) {
    check(i < 50, 'the running dispatcher is listed on the overview');
    await page.waitForTimeout(200);
    await page.reload({ waitUntil: 'load' });
  }
  check(await page.locator('#no-dispatchers').count() === 0, 'no "no dispatcher" warning while one runs');
  await shot(page, 'overview');

  // Messages, then the keyboard: j selects the first row, Enter opens it.
  await visit(page, t('/messages'), 'messages');
  check(await page.locator('#rows tbody tr[data-href]').count() > 0, 'messages listed');
  // One time format: UTC ISO 8601 as text, the local time on hover.
  const when = page.locator('#rows tbody time[datetime]').first();
  check(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/.test(await when.textContent()), `a time in ISO 8601 UTC: ${await when.textContent()}`);
  check(((await when.getAttribute('title')) || '').endsWith('(local)'), 'the local time is its title');
  await shot(page, 'messages');
  await page.keyboard.press('j');
  await Promise.all([page.waitForURL(/\/messages\/\d+$/), page.keyboard.press('Enter')]);
  timings.message = 0;
  check((await page.textContent('h1')).startsWith('Message '), 'detail page');
  check(await page.locator('#payload').count() === 1, 'payload shown');
  await shot(page, 'message');

  // The attempt timeline: each failed attempt, oldest first, opens to its
  // dispatcher, duration and error.
  await visit(page, t('/messages/' + historyID), 'message_history');
  const attempts = page.locator('ol.timeline details.attempt');
  check(await attempts.count() === 3, `three failed attempts in the timeline: ${await attempts.count()}`);
  const summaries = await page.locator('ol.timeline details.attempt summary strong').allTextContents();
  check(summaries[0] === 'Attempt 1: failed, retried (503)' && summaries[2] === 'Attempt 3: failed, retried',
    `the attempts, oldest first: ${summaries}`);
  for (let i = 0; i < 3; i++) {
    const a = attempts.nth(i);
    check(!(await a.locator('dd.error').isVisible()), `attempt ${i + 1} starts closed`);
    await a.locator('summary').click();
    check(await a.locator('dd.error').isVisible(), `attempt ${i + 1} opens to its error`);
  }
  check((await attempts.nth(0).locator('dd.error').textContent()).includes('upstream timeout'), 'the first attempt\'s error');
  check((await attempts.nth(1).locator('dd.error').textContent()).includes('<b>oops</b>'), 'an error shown as text, not markup');
  check((await attempts.nth(2).locator('dd code').textContent()) === 'relay-a', 'the dispatcher that made it');
  await shot(page, 'message-attempts');

  // Top errors: the dead letters grouped by event type and error shape;
  // a group's link opens the dead-letter page filtered to it.
  await visit(page, t('/dead'), 'dead_first');
  await Promise.all([page.waitForURL(/\/dead\/top$/), page.click('#top-errors-link')]);
  const groups = page.locator('#top-errors tbody tr[data-count]');
  check(await groups.count() === 2, `two groups of dead letters: ${await groups.count()}`);
  const biggest = Number(await groups.first().getAttribute('data-count'));
  check(biggest === deadMatching, `the largest group first: ${biggest}`);
  check((await groups.first().textContent()).includes(deadEvent), 'the largest group is the filtered event type');
  check((await groups.first().locator('code').textContent()).includes('<n>'), 'numbers folded in the shape');
  await shot(page, 'top-errors');
  await Promise.all([page.waitForURL(/\/dead\?/), groups.first().locator('a.group-link').click()]);
  check(new URL(page.url()).searchParams.get('event_type') === deadEvent, 'the group link filters its event type');
  check(await countOf(page) === biggest, `the group's filter selects the group: ${await countOf(page)}`);

  // Dead letters: filter by event type through the form.
  await visit(page, t('/dead'), 'dead');
  check(await countOf(page) === deadMatching + deadOther, 'dead page counts all dead');
  await page.fill('#filter-first', deadEvent);
  await Promise.all([page.waitForURL(/event_type=/), page.click('#filters button[type="submit"]')]);
  check(new URL(page.url()).searchParams.get('event_type') === deadEvent, 'the filter is in the URL');
  check(await countOf(page) === deadMatching, `filtered count ${await countOf(page)} is ${deadMatching}`);
  await shot(page, 'dead');

  // A skip's confirmation says in red that skipped messages are never
  // delivered; cancelled, it changes nothing. A retry's does not say it.
  await page.click('#skip-all');
  await page.waitForSelector('#confirm[open]');
  const warning = page.locator('#confirm-warning');
  check(await warning.isVisible(), 'the skip confirmation shows its warning');
  check((await warning.textContent()).startsWith('Skipped messages are never delivered'), `skip warning: ${await warning.textContent()}`);
  const red = await warning.evaluate((n) => getComputedStyle(n).color);
  check(red === 'rgb(198, 40, 40)' || red === 'rgb(255, 107, 107)', `the warning is red: ${red}`);
  await shot(page, 'dead-skip-confirm');
  await page.click('#confirm-cancel');
  check(await countOf(page) === deadMatching, 'a cancelled skip changes nothing');

  // Retry all matching: preview count, confirmation, then a tracked job.
  await page.click('#retry-all');
  await page.waitForSelector('#confirm[open]');
  check(!(await page.locator('#confirm-warning').isVisible()), 'a retry confirmation has no skip warning');
  const text = await page.textContent('#confirm-text');
  check(text.includes(new Intl.NumberFormat('en-US').format(deadMatching)), `confirmation names the count: ${text}`);
  await shot(page, 'dead-confirm');
  await page.click('#confirm-ok');
  const seen = [deadMatching];
  await page.waitForSelector('#job-status:not(.hidden)');
  const deadline = Date.now() + 60000;
  for (;;) {
    const n = await page.evaluate(() => Number(document.getElementById('match-count')?.dataset.n)).catch(() => NaN);
    if (!Number.isNaN(n) && n !== seen[seen.length - 1]) seen.push(n);
    if (n === 0) break;
    check(Date.now() < deadline, `count stuck at ${n}`);
    await page.waitForTimeout(100);
  }
  check(seen.every((v, i) => i === 0 || v < seen[i - 1]), `count only fell: ${seen}`);
  await page.waitForSelector('#job-status[data-state="done"]', { timeout: 30000 });
  await page.waitForLoadState('load');

  // The other dead messages are untouched.
  await visit(page, t('/dead'), 'dead_unfiltered');
  check(await countOf(page) === deadOther, `unfiltered dead count ${await countOf(page)} is ${deadOther}`);

  // Pause a route from the overview, with a reason; it is listed with who
  // paused it and a Resume button, which lifts it. Then the whole table:
  // a banner says nothing is delivered until it is resumed.
  await visit(page, t('/'), 'overview_pause');
  check(await page.locator('#no-pauses').isVisible(), 'nothing paused at first');
  await page.fill('#pause-route', 'partner');
  await page.fill('#pause-reason', 'partner maintenance');
  await page.click('#pause-form button[type="submit"]');
  await page.waitForSelector('#confirm[open]');
  check((await page.textContent('#confirm-text')).includes('route "partner"'), 'the confirmation names the route');
  await Promise.all([page.waitForEvent('load'), page.click('#confirm-ok')]);
  const paused = page.locator('#pauses tr[data-route="partner"]');
  await paused.waitFor();
  const row = await paused.textContent();
  check(row.includes('partner maintenance') && row.includes('token'), `the pause is listed with its reason and author: ${row}`);
  check((await page.locator('#destinations tr[data-destination="partner"]').textContent()).includes('paused'), 'the destinations list it as paused');
  await shot(page, 'overview-paused');
  await Promise.all([page.waitForEvent('load'), paused.locator('button.resume').click()]);
  await page.waitForSelector('#no-pauses');
  await page.click('#pause-form button[type="submit"]');
  await page.waitForSelector('#confirm[open]');
  check((await page.textContent('#confirm-text')).includes('the whole table'), 'an empty route pauses the whole table');
  await Promise.all([page.waitForEvent('load'), page.click('#confirm-ok')]);
  await page.waitForSelector('#table-paused');
  await Promise.all([page.waitForEvent('load'), page.locator('#pauses tr[data-route=""] button.resume').click()]);
  await page.waitForSelector('#no-pauses');
  check(await page.locator('#table-paused').count() === 0, 'the banner is gone once resumed');

  await visit(page, t('/replay'), 'replay');
  await shot(page, 'replay');
  await visit(page, t('/audit'), 'audit');
  const audit = await page.textContent('#audit');
  check(audit.includes('dead_retry') || audit.includes('retry'), 'the retry is audited');
  check(audit.includes('pause') && audit.includes('resume'), 'the pauses and resumes are audited');
  await shot(page, 'audit');

  const dark = await newPage('dark');
  await signIn(dark);
  await visit(dark, t('/'), 'overview_dark');
  await dark.waitForSelector('.plot[data-series="dead"] svg path.line', { state: 'attached', timeout: 15000 });
  await shot(dark, 'overview-dark');

  check(problems.length === 0, 'no console errors:\n' + problems.join('\n'));
  console.log(JSON.stringify({ ok: true, count_seen: seen, page_load_ms: timings }));
} catch (err) {
  console.error(err.stack || String(err));
  if (problems.length) console.error('console problems:\n' + problems.join('\n'));
  process.exitCode = 1;
} finally {
  await browser.close();
}
