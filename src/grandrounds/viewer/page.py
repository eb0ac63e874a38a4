"""The viewer's single page and its script (kept in Python so they ship inside the package).

The script builds every node with ``document.createElement`` and puts untrusted text in with
``textContent`` / text nodes only; it never assigns ``innerHTML``. A question's images are
thumbnails (``img.thumb``, at most 240 px wide) beside its answers, each a link to its full size;
their addresses are ``/image/`` and a hash the script checks is 64 hex digits. The page carries the
session's CSRF token in a ``<meta>`` tag (:func:`page_html`); the script sends it with every
review.
"""

from grandrounds.core.display import BASE_CSS

PAGE_HTML = (
    """<!doctype html>
<html><head><meta charset="utf-8"><meta name="csrf-token" content="__CSRF__"><title>grandrounds viewer</title>
<style>
"""
    + BASE_CSS
    + """
nav a{margin-right:1em}th{position:sticky;top:0}.ans{max-height:22em}
.filters label{margin-right:.8em}.review{font-size:12px;color:#345}.msg{color:#176b2c}.err{color:#a11}
form.rv input[type=text]{width:8em}
.answer{min-width:0;overflow-x:auto}table.opts{width:100%;font-size:12px}table.opts td,table.opts th{padding:.1em .3em}
table.opts tr.chosen{font-weight:bold}.mark{color:#176b2c}
.with-images{display:flex;gap:14px;align-items:flex-start}.figures{flex:0 0 auto;max-width:242px}.qa-main{flex:1 1 auto;min-width:0}
.transcript .step{border-left:3px solid #ccd;padding-left:.5em;margin:.4em 0}.toolcall{color:#345;font-size:12px}
.event pre{background:#f6f6f0}.epoch{font-weight:bold;margin-top:.6em}ul.checks li.unmet{color:#a11}ul.checks li.met{color:#176b2c}
figure.fig{margin:0 0 .6em}img.thumb{display:block;max-width:240px;height:auto;border:1px solid #ccc}.imgref{color:#666}
</style></head>
<body><nav><a href="#/" id="nav-runs">Runs</a><a href="#/items" id="nav-items">Questions</a>
<label>Reviewer <input id="reviewer" placeholder="your name"></label></nav>
<div id="status" class="small"></div><main id="main"></main>
<script src="/app.js"></script></body></html>
"""
)


def page_html(csrf: str) -> str:
    """The page with a session's CSRF token (URL-safe text: nothing to escape, checked anyway)."""
    if not csrf.replace("-", "").replace("_", "").isalnum():
        raise ValueError("a CSRF token is URL-safe text")
    return PAGE_HTML.replace("__CSRF__", csrf)


APP_JS = r"""
'use strict';
const main = document.getElementById('main');
const statusEl = document.getElementById('status');
const reviewer = document.getElementById('reviewer');
reviewer.value = localStorage.getItem('gr-reviewer') || '';
reviewer.addEventListener('change', () => localStorage.setItem('gr-reviewer', reviewer.value));

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'className') e.className = v;
    else e.setAttribute(k, v);
  }
  for (const kid of kids) {
    if (kid === null || kid === undefined) continue;
    e.appendChild(typeof kid === 'string' || typeof kid === 'number' ? document.createTextNode(String(kid)) : kid);
  }
  return e;
}
const fmt = (v, d = 3) => (v === null || v === undefined) ? 'n/a' : Number(v).toFixed(d);
const csrf = document.querySelector('meta[name="csrf-token"]').getAttribute('content');
async function api(path, body) {
  const opts = body ? {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify(Object.assign({csrf}, body))} : {};
  const r = await fetch(path, opts);
  const text = await r.text();
  let data;
  try { data = JSON.parse(text); } catch (e) { data = {error: text.trim() || r.statusText}; }  // plain-text refusals (421, 403, 503)
  if (!r.ok) throw new Error(data.error || r.statusText);
  return data;
}
function parseHash() {
  const h = location.hash.slice(1) || '/';
  const [path, query] = h.split('?');
  return {path, params: new URLSearchParams(query || '')};
}
async function route() {
  const {path, params} = parseHash();
  main.replaceChildren();
  statusEl.textContent = '';
  try {
    if (path.startsWith('/item/')) await showItem('/api/item/' + encodeURIComponent(path.slice(6)));
    else if (path === '/q') await showItem('/api/item?' + new URLSearchParams({b: params.get('b') || '', d: params.get('d') || '', s: params.get('s') || ''}).toString());
    else if (path === '/items') await showItems(params);
    else await showRuns();
  } catch (e) { statusEl.className = 'err'; statusEl.textContent = 'Error: ' + e.message; }
}
window.addEventListener('hashchange', route);

async function showRuns() {
  const all = await api('/api/runs');
  const runs = all.filter(r => !r.benchmark.startsWith('contamination:'));  // probe runs: listed apart, never among scores
  const judged = runs.some(r => r.judge);  // no judge column where no run has a judge
  const heads = ['benchmark', 'run', 'setting', 'score', '95% CI', 'n', 'unscored', ...(judged ? ['judge'] : []), 'reviews', 'run id'];
  const t = el('table', {id: 'runs'}, el('tr', {}, ...heads.map(h => el('th', {}, h))));
  for (const r of runs) {
    const q = r.col ? {benchmark: r.benchmark, col: r.col} : {benchmark: r.benchmark, run: r.run_id};
    const link = el('a', {href: '#/items?' + new URLSearchParams(q).toString(), className: 'run-link', title: r.title}, r.label);
    const ci = r.ci95 ? '[' + fmt(r.ci95[0]) + ', ' + fmt(r.ci95[1]) + ']' : 'n/a';
    t.appendChild(el('tr', {}, el('td', {}, r.benchmark), el('td', {}, link), el('td', {className: 'small'}, r.setting), el('td', {}, fmt(r.score)), el('td', {}, ci),
      el('td', {}, r.n ?? ''), el('td', {}, r.n_unscored ?? ''), ...(judged ? [el('td', {}, r.judge || '')] : []), el('td', {}, r.n_reviews),
      el('td', {className: 'small'}, r.run_id)));
  }
  main.append(el('h2', {}, 'Runs'), t);
  showProbes(all.filter(r => r.benchmark.startsWith('contamination:')));
}

function showProbes(probes) {
  if (!probes.length) return;
  const heads = ['benchmark', 'model', 'probe', 'unit', 'items', 'paired', 'original', 'control', 'difference', '95% CI', 'run id'];
  const t = el('table', {id: 'probes'}, el('tr', {}, ...heads.map(h => el('th', {}, h))));
  for (const r of probes) {
    const c = r.contamination || {};
    const ci = c.ci95 ? '[' + fmt(c.ci95[0]) + ', ' + fmt(c.ci95[1]) + ']' : 'n/a';
    const diff = typeof c.difference === 'number' ? (c.difference >= 0 ? '+' : '') + c.difference.toFixed(3) : 'n/a';
    t.appendChild(el('tr', {}, el('td', {}, r.benchmark.slice('contamination:'.length)), el('td', {}, r.model), el('td', {}, String(c.probe ?? '')),
      el('td', {className: 'small'}, String(c.unit ?? '')), el('td', {}, String(c.n_items ?? '')), el('td', {}, r.n ?? ''), el('td', {}, fmt(c.original)),
      el('td', {}, fmt(c.control)), el('td', {}, diff), el('td', {}, ci), el('td', {className: 'small'}, r.run_id)));
  }
  main.append(el('h2', {}, 'Contamination probes (not scores)'),
    el('p', {className: 'small'}, "Each probe compares the benchmark's own wording with a reworded control: difference = original - control, paired bootstrap 95% CI."), t);
}

// options: strings, or [value, text] pairs
function select(id, label, options, value) {
  const s = el('select', {id}, el('option', {value: ''}, '(any)'));
  for (const o of options) {
    const [v, text] = Array.isArray(o) ? o : [o, o];
    const opt = el('option', {value: v}, text); if (v === value) opt.selected = true; s.appendChild(opt);
  }
  return el('label', {}, label + ' ', s);
}
function check(id, label, on) {
  const c = el('input', {type: 'checkbox', id}); c.checked = on;
  return el('label', {}, c, ' ' + label);
}

async function showItems(params) {
  const facets = await api('/api/facets');
  const p = k => params.get(k) || '';
  const q = el('input', {id: 'f-q', placeholder: 'search questions and answers', value: p('q'), maxlength: '200'});
  const colOptions = facets.columns.filter(c => !p('benchmark') || c.benchmark === p('benchmark')).map(c => [c.col, c.benchmark + ': ' + c.label]);
  const form = el('form', {className: 'filters', id: 'filters'},
    select('f-benchmark', 'benchmark', facets.benchmarks, p('benchmark')), select('f-model', 'model', facets.models, p('model')),
    select('f-col', 'run', colOptions, p('col')),
    select('f-dimension', 'dimension', facets.dimensions, p('dimension')), select('f-verdict', 'verdict', ['met', 'unmet', 'unknown'], p('verdict')),
    check('f-disagree', 'runs disagree', p('disagree') === '1'), check('f-unknown', 'unknown verdicts', p('unknown') === '1'),
    check('f-queued', 'in review queue', p('queued') === '1'), check('f-flagged', 'flagged answers', p('flagged') === '1'), q, el('button', {type: 'submit', id: 'f-apply'}, 'Apply'));
  form.addEventListener('submit', ev => {
    ev.preventDefault();
    const np = new URLSearchParams();
    for (const k of ['benchmark', 'model', 'col', 'dimension', 'verdict', 'q']) { const v = document.getElementById('f-' + k).value; if (v) np.set(k, v); }
    if (p('run') && !np.get('col')) np.set('run', p('run'));
    for (const k of ['disagree', 'unknown', 'queued', 'flagged']) if (document.getElementById('f-' + k).checked) np.set(k, '1');
    location.hash = '#/items?' + np.toString();
  });
  main.append(form);
  const t0 = performance.now();
  const data = await api('/api/items?' + params.toString());
  // one column per grading of a run (never one per model name), narrowed by the filters
  const cols = facets.columns.filter(c => (!p('benchmark') || c.benchmark === p('benchmark')) && (!p('model') || c.model === p('model'))
    && (!p('col') || c.col === p('col')) && (!p('run') || c.run_id === p('run')));
  const t = el('table', {id: 'items'}, el('tr', {}, el('th', {}, 'question'), el('th', {}, 'benchmark'),
    ...cols.map(c => el('th', {className: 'small col-head', title: c.title}, c.label))));
  for (const it of data.items) {
    const ref = new URLSearchParams({b: it.benchmark, d: it.dataset, s: it.sample_id}).toString();
    const a = el('a', {href: '#/q?' + ref, className: 'item-link'}, it.sample_id + ': ' + it.question);
    const flags = (it.disagree ? ' [disagree]' : '') + (it.n_unknown ? ' [unknown ' + it.n_unknown + ']' : '');
    t.appendChild(el('tr', {}, el('td', {}, a, el('span', {className: 'small'}, flags)), el('td', {}, it.benchmark),
      ...cols.map(c => { const v = it.values[c.col]; return el('td', {}, v ? fmt(v.value, 2) : '', v && v.flagged ? el('span', {className: 'err small flag-mark', title: 'the answer addresses the grader'}, ' flagged') : null); })));
  }
  const pages = Math.max(1, Math.ceil(data.total / data.per_page));
  const go = n => { const np = new URLSearchParams(params); np.set('page', n); location.hash = '#/items?' + np.toString(); };
  const pager = el('p', {id: 'pager'}, el('button', {id: 'prev', onclick: () => go(data.page - 1)}, '< prev'),
    ' page ' + data.page + ' of ' + pages + ' (' + data.total + ' questions) ', el('button', {id: 'next', onclick: () => go(data.page + 1)}, 'next >'));
  pager.querySelector('#prev').disabled = data.page <= 1;
  pager.querySelector('#next').disabled = data.page >= pages;
  main.append(pager, t);
  statusEl.textContent = 'loaded in ' + Math.round(performance.now() - t0) + ' ms';
}

async function submitReview(body) {
  body.reviewer = reviewer.value;
  try {
    await api('/api/review', body);
    await route();
    statusEl.className = 'msg'; statusEl.textContent = 'review saved';
  } catch (e) { statusEl.className = 'err'; statusEl.textContent = 'review not saved: ' + e.message; }
}

function criterionForm(a, sampleId, cid) {
  const sel = el('select', {className: 'rv-verdict'}, el('option', {value: 'met'}, 'met'), el('option', {value: 'unmet'}, 'unmet'));
  const reason = el('input', {type: 'text', className: 'rv-reason', placeholder: 'reason'});
  const f = el('form', {className: 'rv'}, sel, reason, el('button', {type: 'submit', className: 'rv-submit'}, 'review'));
  f.addEventListener('submit', ev => { ev.preventDefault();
    submitReview({run_id: a.run_id, grader_fp: a.grader_fp, sample_id: sampleId, criterion_id: cid, verdict: sel.value, reason: reason.value}); });
  return f;
}
function scoreForm(a, sampleId) {
  const score = el('input', {type: 'number', step: 'any', className: 'rv-score', placeholder: 'score'});
  const reason = el('input', {type: 'text', className: 'rv-reason', placeholder: 'reason'});
  const f = el('form', {className: 'rv'}, 'Your score: ', score, reason, el('button', {type: 'submit', className: 'rv-submit'}, 'save'));
  f.addEventListener('submit', ev => { ev.preventDefault();
    submitReview({run_id: a.run_id, grader_fp: a.grader_fp, sample_id: sampleId, score: score.value, reason: reason.value}); });
  return f;
}

// a log-prob answer: each option's log-probability and share, the chosen one marked
function optionTable(opts) {
  const t = el('table', {className: 'opts'}, el('tr', {}, ...['option', '', 'log-prob', 'share', 'text'].map(h => el('th', {}, h))));
  for (const o of opts) {
    const marks = [o.chosen ? 'chosen' : '', o.chosen_norm && !o.chosen ? 'chosen (length-normalised)' : '', o.target ? 'key' : ''].filter(Boolean).join(', ');
    t.appendChild(el('tr', {className: o.chosen ? 'chosen' : ''}, el('td', {}, o.letter + (o.shown !== o.letter ? ' (shown ' + o.shown + ')' : '')),
      el('td', {className: 'mark'}, marks), el('td', {}, o.logprob === null ? 'not scored' : fmt(o.logprob, 3)),
      el('td', {}, o.share === null ? '' : (100 * o.share).toFixed(1) + '%'), el('td', {}, o.text)));
  }
  return t;
}

// a message: its text parts as text, each image part a marker [image n] (its thumbnail is in `figs`)
function messageView(m, figs) {
  const div = el('div', {className: 'q'}, el('b', {}, m.role + ': '));
  const parts = typeof m.content === 'string' ? [{type: 'text', text: m.content}] : (Array.isArray(m.content) ? m.content : []);
  for (const p of parts) {
    if (p && p.type === 'image') { figs.push(p); div.append(el('span', {className: 'imgref'}, '[image ' + figs.length + '] ')); }
    else if (p && p.type === 'text') div.append(document.createTextNode(String(p.text)));
  }
  return div;
}
// one run's request: its messages as sent, and the continuations a log-probability call scored
function sentView(sent, figs) {
  const box = el('div', {className: 'sent-messages'}, ...(sent.messages || []).map(m => messageView(m, figs)));
  if ((sent.continuations || []).length) box.append(el('div', {className: 'small'}, String(sent.kind) + ': scored continuations ' + sent.continuations.map(c => JSON.stringify(String(c))).join(', ')));
  return box;
}
const SHOWN_TYPES = ['image/jpeg', 'image/png', 'image/gif', 'image/webp'];
// one image: a thumbnail linking to the full-size image (served by /image/<sha256>)
function figure(p, n) {
  const what = 'image ' + n + ' · ' + String(p.media_type) + ' · ';
  if (typeof p.sha256 !== 'string' || !/^[0-9a-f]{64}$/.test(p.sha256)) return el('div', {className: 'fig err'}, what + 'not a stored image');
  if (!SHOWN_TYPES.includes(p.media_type)) return el('div', {className: 'fig small'}, what + p.sha256.slice(0, 12) + ' (this type is not shown)');
  const url = '/image/' + p.sha256;
  const img = el('img', {src: url, className: 'thumb', alt: 'image ' + n});
  const cap = el('figcaption', {className: 'small'}, what + p.sha256.slice(0, 12));
  img.addEventListener('error', () => { img.replaceWith(el('span', {className: 'err'}, 'image not in this store')); });
  return el('figure', {className: 'fig'}, el('a', {href: url, target: '_blank', rel: 'noopener', title: 'open full size'}, img), cap);
}

// an agent's episodes: each step's reply, its tool calls, what answered it; then the outcome and the grader's checks
function transcript(a) {
  const box = el('div', {className: 'transcript'});
  for (const ep of a.episodes) {
    const outcome = (a.epochs || []).find(e => e.epoch === ep.epoch) || {};
    box.append(el('div', {className: 'epoch'}, 'episode ' + (ep.epoch + 1) + ' · ' + ep.status
      + (outcome.success === true ? ' · success' : outcome.success === false ? ' · failure' : '')));
    for (const st of ep.steps || []) {
      const step = el('div', {className: 'step'}, el('div', {className: 'small'}, 'step ' + (Number(st.step) + 1)));
      if (st.reply) step.append(el('pre', {className: 'ans agent'}, String(st.reply)));
      for (const c of st.tool_calls || []) step.append(el('div', {className: 'toolcall'}, 'calls ' + String(c.name) + ' ', el('code', {}, String(c.arguments))));
      for (const ev of st.events || []) {
        const who = String(ev.actor || 'environment') + (ev.tool ? ' ' + String(ev.tool) : '');
        step.append(el('div', {className: 'event'}, el('b', {}, who + ': '), el('pre', {className: 'ans'}, String(ev.text === undefined ? '' : ev.text))));
        if ((ev.refused || []).length) step.append(el('div', {className: 'err small'}, 'sandbox refused: ' + ev.refused.join('; ')));
      }
      if (st.error) step.append(el('div', {className: 'err'}, String(st.error)));
      box.append(step);
    }
    if (outcome.final !== undefined && outcome.final !== null) box.append(el('div', {className: 'final'}, el('b', {}, 'final answer: '), String(outcome.final)));
    const checks = outcome.checks || [];
    if (checks.length) box.append(el('ul', {className: 'checks'}, ...checks.map(c => el('li', {className: c.passed ? 'met' : 'unmet'},
      (c.passed ? 'passed: ' : 'FAILED: ') + String(c.name) + (c.detail ? ' (' + String(c.detail) + ')' : '')))));
  }
  return box;
}

// what the grade says beside its value: flags of an answer that addresses the grader; a reply no
// answer was read from, and what the other protocol's reading found in it
function integrityLines(a) {
  const out = [];
  if ((a.flags || []).length) out.push(el('div', {className: 'err flags'}, 'flagged: ' + a.flags.map(String).join(', ')));
  if (a.unread) {
    const o = a.other_reading;
    const other = !o ? '' : (o.extracted === null || o.extracted === undefined)
      ? ' · the ' + String(o.protocol) + ' reading finds no answer either'
      : ' · the ' + String(o.protocol) + ' reading would read ' + String(o.extracted) + ' (value ' + fmt(o.value) + ')';
    out.push(el('div', {className: 'err unread'}, 'unreadable: no answer was read from this reply' + other));
  }
  return out;
}

async function showItem(url) {
  const d = await api(url);
  const s = d.sample;
  main.append(el('h2', {}, d.benchmark + ' / ' + s.id));
  const figs = [];
  // what was sent: one block when every run on the page sent the same messages, else the question
  // as stored and, under each answer, what its run sent
  const sents = d.answers.map(a => a.sent).filter(x => x);
  const same = sents.length === d.answers.length && sents.length > 0 && sents.every(x => JSON.stringify(x) === JSON.stringify(sents[0]));
  const qa = el('div', {className: 'qa-main'});
  if (same) {
    qa.append(el('div', {className: 'small sent-label'}, 'Sent to the model' + (d.answers.length > 1 ? ' (the same in every run below)' : '') + ':'));
    qa.append(sentView(sents[0], figs));
  } else {
    qa.append(el('div', {className: 'small sent-label'}, 'The question as stored' + (d.answers.length ? ' (what each run sent is under its answer)' : '') + ':'));
    qa.append(...(s.messages || []).map(m => messageView(m, figs)));
  }
  main.append(figs.length ? el('div', {className: 'with-images', id: 'qa'}, el('div', {className: 'figures', id: 'figures'}, ...figs.map((p, i) => figure(p, i + 1))), qa) : qa);
  if (s.target !== null && s.target !== undefined) qa.append(el('p', {}, 'Target: ' + (s.target_text !== undefined ? s.target_text : JSON.stringify(s.target))));
  const grid = el('div', {className: 'answers', id: 'answers'});
  grid.style.gridTemplateColumns = 'repeat(' + Math.max(1, d.answers.length) + ', minmax(0, 1fr))';
  for (const a of d.answers) {
    const revs = a.reviews.filter(r => !r.criterion_id).map(r => el('div', {className: 'review'}, r.reviewer + ' scored ' + r.score + ': ' + r.reason + ' (' + r.created_at + ')'));
    const info = (a.judge ? 'judge ' + a.judge + ' · ' : '') + 'value ' + fmt(a.value) + ' · with reviews ' + fmt(a.reviewed_value)
      + (a.extracted ? ' · extracted ' + a.extracted : '') + (a.grade_error ? ' · ' + a.grade_error : '');
    const own = (!same && a.sent) ? [el('details', {className: 'sent'}, el('summary', {}, 'sent by this run'), sentView(a.sent, []))] : [];
    grid.append(el('div', {className: 'answer'}, el('b', {title: a.title}, a.label), el('div', {className: 'small'}, info), ...own,
      ...(a.read ? [el('div', {className: 'read'}, 'Read: ' + a.read)] : []), ...integrityLines(a),
      (a.episodes || []).length ? transcript(a) : (a.options ? optionTable(a.options) : el('pre', {className: 'ans'}, a.text !== null ? a.text : '(no answer' + (a.error ? ': ' + a.error : '') + ')')),
      ...(a.votes || []).map(v => el('div', {className: 'small vote'}, v.judge + ' run ' + v.run + ': ' + (v.score === null ? v.status : v.score) + (v.explanation ? ' · ' + v.explanation : ''))),
      ...revs, scoreForm(a, s.id)));
  }
  qa.append(grid);
  if ((s.rubric || []).length) {
    const t = el('table', {id: 'rubric'}, el('tr', {}, el('th', {}, 'criterion'), el('th', {}, 'points'), ...d.answers.map(a => el('th', {title: a.title}, a.label))));
    for (const c of s.rubric) {
      const cells = d.answers.map(a => {
        const v = a.verdicts.find(x => x.criterion_id === c.id);
        if (!v) return el('td', {className: 'unknown'}, 'not graded');
        const split = new Set(v.votes).size > 1 ? el('span', {className: 'small'}, ' votes: ' + v.votes.join(', ')) : null;
        const revs = a.reviews.filter(r => r.criterion_id === c.id).map(r => el('div', {className: 'review'}, 'reviewer ' + r.reviewer + ': ' + r.verdict + ' (' + r.reason + ', ' + r.created_at + ')'));
        return el('td', {}, el('span', {className: 'verdict ' + (['met', 'unmet'].includes(v.status) ? v.status : 'unknown')}, v.status), split,
          el('div', {className: 'small'}, v.explanation), ...revs, criterionForm(a, s.id, c.id));
      });
      t.appendChild(el('tr', {}, el('td', {}, c.text, el('div', {className: 'small'}, (c.tags || []).join(', '))), el('td', {}, c.points), ...cells));
    }
    main.append(t);
  }
}
route();
"""
