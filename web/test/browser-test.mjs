// The web calculator in a real browser (scripts/web-test.sh runs it): Debian's headless Chromium,
// driven by playwright-core, opens the page from a static server and checks that the page computes
// the CLI's bytes. The CLI's reports come from files the script wrote with build/release/moemem:
//   MOEMEM_SITE        the page's URL (the server's root)
//   MOEMEM_CLI_REF     `moemem analyze <the README's reference flags> --format json`
//   MOEMEM_CLI_OTHER   the same for MOEMEM_OTHER_HASH, a configuration given in the URL's hash
//   MOEMEM_CONFIG      data/models/deepseek-v3.json, pasted as a config.json
//   MOEMEM_SCREENSHOT  where to save the reference page's screenshot
import { readFileSync } from "node:fs";
import { chromium } from "playwright-core";

const env = (name) => {
  if (!process.env[name]) throw new Error(`${name} is not set (scripts/web-test.sh sets it)`);
  return process.env[name];
};
const site = env("MOEMEM_SITE");
const cliRef = JSON.parse(readFileSync(env("MOEMEM_CLI_REF"), "utf8"));
const cliOther = JSON.parse(readFileSync(env("MOEMEM_CLI_OTHER"), "utf8"));

let failures = 0;
function check(ok, what) {
  console.log(`${ok ? "ok  " : "FAIL"} ${what}`);
  if (!ok) failures += 1;
}
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

// Opens the page at `hash` and waits for the computation to finish; returns window.moememResult.
async function open(page, hash) {
  await page.goto("about:blank");  // a fresh document, not a same-page hash change
  await page.goto(site + "index.html" + hash);
  await page.waitForSelector("#status[data-state]", { timeout: 30000 });
  return page.evaluate(() => window.moememResult);
}

// Every stage's bytes and the peak, as the page computed and as its chart drew them, against the CLI's.
async function compareWithCli(page, result, cli, name) {
  check(result && result.analyze, `${name}: the page computed a report (${result && result.error ? JSON.stringify(result.error) : "no error"})`);
  if (!result || !result.analyze) return;
  const stages = result.analyze.stages;
  check(stages.length === cli.stages.length, `${name}: ${cli.stages.length} stages`);
  check(same(stages[1].bytes, cli.stages[1].bytes), `${name}: stage 1 bytes equal the CLI's (total ${cli.stages[1].bytes.total})`);
  check(stages.every((s, i) => same(s.bytes, cli.stages[i].bytes)), `${name}: every stage's bytes equal the CLI's`);
  check(same(result.analyze.peak, cli.peak), `${name}: peak equals the CLI's (stage ${cli.peak.stage}, ${cli.peak.total_bytes} bytes)`);
  const drawn = await page.$$eval("#stage-chart g.stage", (gs) => gs.map((g) => Number(g.dataset.total)));
  check(same(drawn, cli.stages.map((s) => s.bytes.total)), `${name}: the chart has one bar per stage, of the CLI's totals`);
  const peakText = await page.textContent("#peak-bytes");
  check(peakText.replace(/,/g, "") === String(cli.peak.total_bytes), `${name}: the page shows the peak's bytes (${peakText})`);
  check(result.explain && result.explain.stage === cli.peak.stage && result.explain.total_bytes === cli.peak.total_bytes,
    `${name}: the explain table is the peak stage's, of the peak's total`);
}

const browser = await chromium.launch({
  executablePath: process.env.MOEMEM_CHROMIUM || "/usr/lib/chromium/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1300, height: 900 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.on("request", (r) => { if (!r.url().startsWith(site) && r.url() !== "about:blank") errors.push(`request outside the site: ${r.url()}`); });

  // The page with no hash shows the reference configuration.
  const ref = await open(page, "");
  await compareWithCli(page, ref, cliRef, "reference (no hash)");
  const capacity = await page.$$eval("#capacity-line + text", (t) => t.map((e) => e.textContent));
  check(capacity.length === 1 && capacity[0].startsWith("h800-80g"), `reference: the GPU's capacity line is drawn (${capacity})`);
  await page.screenshot({ path: env("MOEMEM_SCREENSHOT"), fullPage: true });

  // The URL it wrote reproduces the configuration in a fresh page.
  const link = page.url();
  check(link.includes("#") && link.includes("tp=2") && link.includes("pp=16"), `the state is in the URL (${link.slice(site.length)})`);
  const fresh = await browser.newPage();
  await fresh.goto(link);
  await fresh.waitForSelector("#status[data-state]", { timeout: 30000 });
  check(same(await fresh.evaluate(() => window.moememResult.analyze.stages), cliRef.stages), "the link reproduces every stage's bytes");
  await fresh.close();

  // Another configuration, given in the hash.
  const other = await open(page, "#" + env("MOEMEM_OTHER_HASH"));
  await compareWithCli(page, other, cliOther, "hash configuration");

  // deepseek-v3's config.json pasted instead of the preset: the same bytes (the CLI's --model
  // with the preset's file path gives them too), and the link carries the pasted config.
  await open(page, "");
  await page.fill("textarea[name=config]", readFileSync(env("MOEMEM_CONFIG"), "utf8"));
  await page.waitForFunction(() => window.moememResult && !window.moememResult.args.includes("--model"), null, { timeout: 10000 });
  const pasted = await page.evaluate(() => window.moememResult);
  check(pasted.analyze && same(pasted.analyze.stages.map((s) => s.bytes), cliRef.stages.map((s) => s.bytes)),
    "a pasted config.json gives the preset's bytes");
  check(decodeURIComponent(page.url()).includes('"n_routed_experts":256'), "the link holds the pasted config.json");

  // A request the entry cannot read is an error value, not a crash.
  const malformed = await page.evaluate(() => {
    const p = moemem._malloc(8);
    moemem.stringToUTF8("{oops", p, 8);
    const r = JSON.parse(moemem.UTF8ToString(moemem._moemem_run(p)));
    moemem._free(p);
    return r;
  });
  check(malformed.code === 2 && malformed.stderr.includes("bad request"), `a malformed request is refused (${malformed.stderr.trim()})`);

  // An edit in the form recomputes, and bad input shows the CLI's error instead of a report.
  await open(page, "");
  await page.fill("input[name=tp]", "0");
  await page.waitForFunction(() => window.moememResult && window.moememResult.error, null, { timeout: 10000 });
  const bad = await page.evaluate(() => window.moememResult.error);
  check(bad.field === "--tp", `tp 0 is refused with the CLI's error (field ${bad.field}, accepted: ${bad.accepted})`);
  check(await page.$$eval("#stage-chart", (e) => e.length) === 0, "no chart for bad input");
  check((await page.textContent("#error")).includes("--tp"), "the error is shown on the page");

  // analyze --format html (issue 17's report, written by the CLI): renders here with nothing
  // fetched from outside, one bar per stage, and the CLI's peak in its text.
  const report = await browser.newPage();
  report.on("pageerror", (e) => errors.push(`report: ${e}`));
  report.on("request", (r) => { if (!r.url().startsWith(site)) errors.push(`report: request outside the site: ${r.url()}`); });
  await report.goto(site + env("MOEMEM_HTML_REPORT"));
  const bars = await report.$$eval("svg rect.stage", (r) => r.length);
  check(bars === cliRef.stages.length, `the HTML report draws one bar per stage (${bars} of ${cliRef.stages.length})`);
  const peakLine = await report.textContent("p.peak");
  check(peakLine.includes(`${cliRef.peak.total_bytes.toLocaleString("en-US")}`) || peakLine.includes(String(cliRef.peak.total_bytes)),
    `the HTML report states the CLI's peak (${peakLine.trim()})`);
  await report.screenshot({ path: env("MOEMEM_SCREENSHOT").replace(/\.png$/, "-report.png"), fullPage: false });
  await report.close();

  check(errors.length === 0, `no page errors or outside requests${errors.length ? ": " + errors.join("; ") : ""}`);
} finally {
  await browser.close();
}
if (failures) {
  console.error(`web test: ${failures} check(s) failed`);
  process.exit(1);
}
console.log("web test: all checks passed");
