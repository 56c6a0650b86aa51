// The admin page in headless Chromium (Debian's `chromium`, driven by playwright-core):
// log in, see the boot activity frame drawn, create a node with a port, an iqn connector and an iSCSI target, see its script,
// edit the target (new portal, CHAP secret kept masked), add and delete a port, power the node
// on, save a screenshot of the node page, check that a form posted without its CSRF token is
// refused, log out. Run by tests/it/admin.rs:
//   node browser.js <base url> <user> <password> <screenshot path>
const { chromium } = require('playwright-core');

const [base, user, password, screenshot] = process.argv.slice(2);

function check(condition, message) {
  if (!condition) throw new Error(message);
}

(async () => {
  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1366, height: 900 } });
    page.setDefaultTimeout(15000);
    await page.goto(`${base}/admin/`);
    check(page.url().endsWith('/admin/login'), `not sent to the login page: ${page.url()}`);
    await page.fill('input[name=username]', user);
    await page.fill('input[name=password]', password);
    await Promise.all([page.waitForURL(`${base}/admin/`), page.click('button:has-text("Log in")')]);
    check((await page.locator('h2').allTextContents()).includes('Nodes'), 'no nodes list after log-in');
    // The boot activity frame: allowed by the page's policy, drawn as an SVG of 60 minutes.
    const activity = page.frameLocator('iframe[src="/admin/activity"]');
    await activity.locator('svg').waitFor();
    const minutes = await activity.locator('svg g.minute').count();
    check(minutes === 60, `the boot activity frame shows ${minutes} minutes, not 60`);
    const cookies = await page.context().cookies();
    const session = cookies.find((c) => c.name === 'bootvol_admin');
    check(session && session.httpOnly && session.sameSite === 'Strict', `cookie flags: ${JSON.stringify(session)}`);

    await page.fill('input[name=name]', 'browser-node');
    await page.selectOption('select[name=storage_interface]', 'external');
    await page.fill('input[name=mac]', '52:54:00:ab:cd:ef');
    await page.fill('input[name=connector_iqn]', 'iqn.2024-01.org.example.node:browser-node');
    await page.fill('input[name=volume_id]', 'vol-browser');
    await page.fill('input[name=target_iqn]', 'iqn.2024-01.org.example.san:browser');
    await page.fill('input[name=target_portal]', '192.0.2.10:3260');
    await page.fill('input[name=auth_username]', 'chapuser');
    await page.fill('input[name=auth_password]', 'browser-chap-secret');
    await Promise.all([page.waitForURL(/\/admin\/nodes\/[0-9a-f-]+$/), page.click('button:has-text("Create")')]);
    const script = await page.textContent('#script');
    check(script.startsWith('#!ipxe'), `no script: ${script}`);
    // Not deployed yet: the node gets the script that hands back to the firmware, naming it.
    check(script.includes('browser-node'), `script does not name the node: ${script}`);
    check((await page.content()).includes('iqn.2024-01.org.example.san:browser'), 'target not shown');
    check(!(await page.content()).includes('browser-chap-secret'), 'CHAP secret shown');

    check((await page.textContent('[role=status]')) === 'Node created.', 'no "Node created." message');
    const node = page.url();

    // Edit the target: open its <details>, change the portal in the JSON, keep the masked secret.
    await page.click('summary:has-text("Edit target 0")');
    const properties = page.locator('textarea[name=properties]').first();
    const edited = (await properties.inputValue()).replace('192.0.2.10:3260', '192.0.2.11:3260');
    check(edited.includes('"******"'), `the CHAP secret is not masked in the form: ${edited}`);
    await properties.fill(edited);
    await Promise.all([page.waitForURL(node), page.click('button:has-text("Save target")')]);
    check((await page.textContent('[role=status]')) === 'Volume target saved.', 'target not saved');
    check((await page.content()).includes('192.0.2.11:3260'), 'new portal not shown');
    check(!(await page.content()).includes('browser-chap-secret'), 'CHAP secret shown after edit');

    // A second port, then deleted; a bad MAC is refused with the API's message.
    await page.fill('input[aria-label="New port MAC address"]', '52:54:00:ab:cd:f0');
    await Promise.all([page.waitForURL(node), page.click('button:has-text("Add port")')]);
    check((await page.locator('input[name=address][value="52:54:00:ab:cd:f0"]').count()) === 1, 'port not added');
    await page.fill('input[aria-label="New port MAC address"]', 'not-a-mac');
    await Promise.all([page.waitForNavigation(), page.click('button:has-text("Add port")')]);
    check((await page.textContent('[role=alert]')).startsWith('port:'), 'bad MAC not refused');
    await page.goto(node);
    await Promise.all([page.waitForURL(node), page.locator('button:has-text("Delete port")').nth(1).click()]);
    check((await page.locator('input[name=address][value="52:54:00:ab:cd:f0"]').count()) === 0, 'port not deleted');

    await Promise.all([page.waitForURL(node), page.click('button:has-text("Power on")')]);
    await page.waitForSelector('text=Power action "power on" started.');
    // Actions run in the background: reload the node page until it shows `row`.
    const until = async (row, what) => {
      for (let i = 0; ; i++) {
        await page.goto(node);
        if ((await page.content()).includes(row)) return;
        check(i < 100, `${what} never happened`);
        await page.waitForTimeout(100);
      }
    };
    await until('<th>Power</th><td>power on</td>', 'power on');

    // Manage, provide, deploy: the node then gets its iSCSI script, the CHAP secret masked.
    for (const [button, state] of [['Manage', 'manageable'], ['Provide', 'available'], ['Deploy', 'active']]) {
      await Promise.all([page.waitForURL(node), page.click(`button:has-text("${button}")`)]);
      await until(`<th>Provision state</th><td>${state}</td>`, button);
    }
    const deployed = await page.textContent('#script');
    check(deployed.includes('sanboot') && deployed.includes('192.0.2.11'), `no sanboot script: ${deployed}`);
    check(deployed.includes('******') && !deployed.includes('browser-chap-secret'), `CHAP not masked: ${deployed}`);
    await page.screenshot({ path: screenshot, fullPage: true });

    // A form without its CSRF token is refused.
    await page.evaluate(() => {
      document.querySelectorAll('input[name=csrf]').forEach((e) => e.remove());
    });
    const [refused] = await Promise.all([
      page.waitForNavigation(),
      page.click('button:has-text("Power off")'),
    ]);
    check(refused.status() === 403, `form without CSRF answered ${refused.status()}`);
    check((await page.content()).includes('CSRF check failed'), 'no CSRF message');

    await page.goto(node);
    await Promise.all([page.waitForURL(`${base}/admin/login`), page.click('button:has-text("Log out")')]);
    await page.goto(`${base}/admin/`);
    check(page.url().endsWith('/admin/login'), 'still logged in after log-out');
    console.log('admin browser flow ok');
  } finally {
    await browser.close();
  }
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
