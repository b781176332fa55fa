// Bundles the dashboard with esbuild into one flat directory that flyt-cluster-manager serves:
// index.html, app.js, app.css. Usage: node build.mjs [--outdir DIR] (default: dist).
import * as esbuild from 'esbuild';
import {copyFileSync, mkdirSync} from 'node:fs';
import {dirname, join} from 'node:path';
import {fileURLToPath} from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const at = args.indexOf('--outdir');
const outdir = at >= 0 ? args[at + 1] : join(here, 'dist');

mkdirSync(outdir, {recursive: true});
await esbuild.build({
  entryPoints: {app: join(here, 'src/main.jsx')},
  bundle: true,
  minify: true,
  sourcemap: false,
  format: 'iife',
  target: ['chrome110', 'firefox110', 'safari16'],
  jsx: 'automatic',
  jsxImportSource: 'preact',
  outdir,
  logLevel: 'warning',
  legalComments: 'none',
});
copyFileSync(join(here, 'src/index.html'), join(outdir, 'index.html'));
console.log(`flyt dashboard built into ${outdir}`);
