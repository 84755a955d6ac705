// Signs in to an outboxd console served over TLS with a self-signed
// certificate, in headless Chromium, and checks what the browser keeps:
// the session cookie Secure, HttpOnly and SameSite=Strict, HSTS on the
// answers, a secure context. Run by console/e2e_test.go.
//
// Environment: CONSOLE_URL (https://...), CONSOLE_USER, CONSOLE_PASSWORD.
import { chromium } from 'playwright-core';

const env = (k) => { const v = process.env[k]; if (!v) throw new Error(`${k} is not set`); return v; };
const base = env('CONSOLE_URL'), user = env('CONSOLE_USER'), password = env('CONSOLE_PASSWORD');

function check(cond, msg) { if (!cond) throw new Error('check failed: ' + msg); }

const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update'],
});
try {
  // The certificate is self-signed: a browser that trusts nothing more
  // refuses it, so what follows is TLS indeed.
  const strict = await browser.newContext();
  let refused = '';
  try { await (await strict.newPage()).goto(base + '/login'); } catch (e) { refused = e.message; }
  check(/ERR_CERT/.test(refused), `an untrusted certificate is refused: ${refused || 'it loaded'}`);
  await strict.close();

  const ctx = await browser.newContext({ ignoreHTTPSErrors: true });
  const page = await ctx.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push(`page error on ${page.url()}: ${e.message}`));
  const first = await page.goto(base + '/');
  check(page.url().startsWith(base + '/login'), `an unauthenticated visit goes to the sign-in form: ${page.url()}`);
  check(first.headers()['strict-transport-security'] === 'max-age=31536000', `HSTS: ${first.headers()['strict-transport-security']}`);
  await page.fill('input[name="user"]', user);
  await page.fill('input[name="password"]', password);
  const [signedIn] = await Promise.all([
    page.waitForResponse((r) => r.url().startsWith(base + '/login') && r.request().method() === 'POST'),
    page.click('button[type="submit"]'),
  ]);
  check(signedIn.status() === 303, `sign-in answers 303, got ${signedIn.status()}`);
  await page.waitForURL((u) => !u.pathname.startsWith('/login'));
  check(await page.evaluate(() => window.isSecureContext && location.protocol === 'https:'), 'a secure context');

  const cookies = await ctx.cookies(base);
  const session = cookies.find((c) => c.name === 'outboxd_console');
  check(session, `the session cookie is kept: ${JSON.stringify(cookies)}`);
  check(session.secure === true, 'the session cookie is Secure');
  check(session.httpOnly === true, 'the session cookie is HttpOnly');
  check(session.sameSite === 'Strict', `the session cookie is SameSite=Strict, got ${session.sameSite}`);
  check(!(await page.evaluate(() => document.cookie)).includes('outboxd_console'), 'no script reads the session cookie');
  const overview = await page.goto(page.url());
  check(overview.ok(), `the overview answers ${overview.status()}`);
  check(overview.headers()['strict-transport-security'] === 'max-age=31536000', 'HSTS on a signed-in page');
  check(problems.length === 0, problems.join('\n'));
  console.log(`signed in over TLS at ${base}; cookie ${session.name}: Secure, HttpOnly, SameSite=${session.sameSite}`);
} finally {
  await browser.close();
}
