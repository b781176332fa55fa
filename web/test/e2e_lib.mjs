// What the dashboard's headless-Chromium checks against a fake cluster manager share: the skip
// rules (exit 77 without Chromium, playwright-core or the built dashboard), the check counter,
// the fake manager's HTTP server (the built dashboard's files, a live stream, and the API answered
// by the caller's function), waitFor and the browser's launch.
//
// Environment: FLYT_WEB_DIR (the built dashboard: index.html, app.js, app.css), FLYT_SHOTS
// (where screenshots go; optional), CHROMIUM (default /usr/bin/chromium).
import {existsSync, mkdirSync, readFileSync} from 'node:fs';
import {createServer} from 'node:http';
import {join} from 'node:path';

export const webDir = process.env.FLYT_WEB_DIR || '';
export const shots = process.env.FLYT_SHOTS || '';
const chromiumPath = process.env.CHROMIUM || '/usr/bin/chromium';

// playwright-core's chromium, or exit 77 (skipped) saying what is missing.
export async function requireBrowser() {
  let chromium;
  try {
    ({chromium} = await import('playwright-core'));
  } catch (e) {
    console.log(`SKIPPED: playwright-core is missing (${e.message}); run scripts/install-deps.sh`);
    process.exit(77);
  }
  for (const need of [chromiumPath, join(webDir, 'index.html'), join(webDir, 'app.js')]) {
    if (!webDir || !existsSync(need)) {
      console.log(`SKIPPED: ${need} is missing (run scripts/install-deps.sh, then build flyt_web)`);
      process.exit(77);
    }
  }
  if (shots) mkdirSync(shots, {recursive: true});
  return chromium.launch({
    executablePath: chromiumPath,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}

// check(name, ok, detail) prints a line per failure; finish() prints the totals and exits.
export function checker() {
  let passed = 0;
  let failed = 0;
  return {
    check(name, ok, detail = '') {
      if (ok) {
        passed += 1;
      } else {
        failed += 1;
        console.log(`FAIL: ${name}${detail ? ` (${detail})` : ''}`);
      }
    },
    step: (s) => console.log(`== ${s}`),
    finish() {
      console.log(`${passed} passed, ${failed} failed`);
      process.exit(failed > 0 ? 1 : 0);
    },
  };
}

// A fake cluster manager on loopback: the dashboard's files from webDir, /api/v1/stream, and
// every other path answered by answer(path) → [status, body].
export async function serveDashboard(answer) {
  const streams = new Set();
  let seq = 1;
  const files = {'/': 'index.html', '/index.html': 'index.html', '/app.js': 'app.js', '/app.css': 'app.css'};
  const types = {html: 'text/html', js: 'text/javascript', css: 'text/css'};
  const server = createServer((req, res) => {
    const path = new URL(req.url, 'http://x').pathname;
    if (files[path]) {
      const name = files[path];
      res.writeHead(200, {'Content-Type': types[name.split('.').pop()]});
      res.end(readFileSync(join(webDir, name)));
      return;
    }
    if (path === '/api/v1/stream') {
      res.writeHead(200, {'Content-Type': 'text/event-stream', 'Cache-Control': 'no-store'});
      res.write(`event: hello\ndata: ${JSON.stringify({seq})}\n\n`);
      streams.add(res);
      req.on('close', () => streams.delete(res));
      return;
    }
    // answer(path, method, body): a POST's JSON body is read first.
    const reply = (body) => {
      const [status, out] = answer(path, req.method, body);
      res.writeHead(status, {'Content-Type': 'application/json'});
      res.end(JSON.stringify(out));
    };
    if (req.method === 'GET') return reply(null);
    let text = '';
    req.on('data', (chunk) => { text += chunk; });
    req.on('end', () => {
      let body = null;
      try {
        body = JSON.parse(text || 'null');
      } catch (e) {
        body = null;
      }
      reply(body);
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    streams,
    // Tells open pages that these lists changed, as the manager's live stream does.
    announce(changed) {
      seq += 1;
      for (const res of streams) res.write(`event: change\ndata: ${JSON.stringify({changed, seq})}\n\n`);
    },
    close() {
      for (const res of streams) res.end();
      server.close();
    },
  };
}

// The answers of a quiet cluster for the lists every view loads: `who` answers whoami, `node`
// (one node of `gpus` GPUs) /nodes, `gpus()` /gpus; allocations, jobs, queue and events are
// empty. null for any other path.
export function quietCluster(path, {who, node, gpus}) {
  switch (path) {
    case '/api/v1/whoami': return [200, {name: who, role: who}];
    case '/api/v1/nodes': return [200, {nodes: [node]}];
    case '/api/v1/gpus': return [200, {gpus: gpus()}];
    case '/api/v1/allocations': return [200, {allocations: []}];
    case '/api/v1/jobs': return [200, {jobs: [], total: 0}];
    case '/api/v1/queue': return [200, {queue: []}];
    case '/api/v1/events': return [200, {events: []}];
    default: return null;
  }
}

// fn() until it returns something truthy (errors count as "not yet"), at most ms; null then.
export async function waitFor(fn, ms = 15000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      // not yet
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return null;
}
