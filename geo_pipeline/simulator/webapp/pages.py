"""The HTML of the simulated consumer chat apps: login wall, captcha and rate-limit pages, and the
chat page (input, search toggle, stop button while streaming, citation cards, history sidebar,
desktop and mobile layouts). The chat page's script reads the app's own SSE frame shape
(frames.py) from ``fetch`` like the real single-page apps do, so a collector can capture the
stream from the network or read the rendered DOM.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Ui:
    """What differs between the apps' pages: names, the stream URL and the controls' markup.
    Texts come from the research (section 3): the search toggle is found by its text
    ("联网搜索", LLM Sentry), the stop button reads "停止生成" while an answer streams, a logged-out
    page shows "登录" (LLM Sentry; geo_client2's ``CheckLoginStatus`` looks for a "登录|注册"
    button, then for a chat input)."""

    title: str
    stream_path: str  # relative to /ui/<platform>/; {cid} is the conversation id
    input_html: str
    send_html: str
    new_chat: str


UIS: dict[str, Ui] = {
    # DeepSeek's completion URL: /api/v0/chat/completion (stored capture, see frames.deepseek).
    "deepseek": Ui(
        "DeepSeek",
        "api/v0/chat/completion",
        '<textarea id="chat-input" placeholder="给 DeepSeek 发送消息" rows="3"></textarea>',
        '<div role="button" aria-label="发送" class="send" tabindex="0">发送</div>',
        "开启新对话",
    ),
    # Doubao's collector filters responses on "/chat/completion" (LLM Sentry).
    "doubao": Ui(
        "豆包",
        "samantha/chat/completion",
        '<textarea data-testid="chat_input_input" placeholder="发消息..." rows="3"></textarea>',
        '<button data-testid="chat_input_send_button" class="send">发送</button>',
        "新对话",
    ),
    # Kimi: POST /api/chat creates the chat, /api/chat/{id}/completion/stream streams it.
    "kimi": Ui(
        "Kimi",
        "api/chat/{cid}/completion/stream",
        '<div class="chat-input-editor" contenteditable="true" role="textbox"></div>',
        '<button class="send-button">发送</button>',
        "新建会话",
    ),
}

# A changed layout (fault): the composer was redesigned, none of the old selectors match.
CHANGED_INPUT = '<div class="composer-v2"><div class="editor-v2" contenteditable="true"></div>'
CHANGED_SEND = '<span class="btn-v2">➤</span></div>'

_CSS = """
* { box-sizing: border-box; }
body { margin: 0; font-family: "Noto Sans CJK SC", sans-serif; display: flex; min-height: 100vh; }
aside.sidebar { width: 240px; background: #f4f5f7; padding: 12px; border-right: 1px solid #ddd; }
aside.sidebar a { display: block; padding: 6px; color: #333; text-decoration: none; }
main { flex: 1; padding: 16px; max-width: 900px; min-width: 0; }
.menu { display: none; }
.msg.user { background: #e8f0ff; padding: 8px; border-radius: 8px; margin: 8px 0; }
.answer { white-space: pre-wrap; line-height: 1.6; overflow-wrap: anywhere; }
.citation-card { display: inline-block; border: 1px solid #ccd; border-radius: 6px; padding: 6px;
                 margin: 4px; width: 200px; font-size: 12px; }
.composer { display: flex; gap: 8px; align-items: flex-end; margin-top: 16px; }
.composer textarea, .composer [contenteditable] { flex: 1; min-height: 48px; border: 1px solid #aaa;
                 padding: 8px; min-width: 0; }
.toggle[aria-pressed="true"] { background: #2b6cff; color: white; }
@media (max-width: 700px) {
  aside.sidebar { display: none; position: fixed; inset: 0 30% 0 0; z-index: 2; }
  aside.sidebar.open { display: block; }
  .menu { display: inline-block; }
  main { padding: 8px; }
  .citation-card { width: 100%; overflow-wrap: anywhere; }
  .composer { flex-wrap: wrap; }
}
"""


def _page(title: str, body: str, script: str = "") -> str:
    return (
        '<!doctype html><html lang="zh-CN"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>"
        f"<body>{body}{script}</body></html>"
    )


def login_page(platform: str, ui: Ui) -> str:
    """The login wall: what a logged-out (or expired) session sees."""
    return _page(
        f"{ui.title} - 登录",
        f'<main class="login-wall"><h1>{html.escape(ui.title)}</h1><p>请登录后继续使用</p>'
        f'<form method="post" action="/ui/{platform}/login">'
        '<input name="account" placeholder="手机号"><button type="submit">登录</button>'
        "</form></main>",
    )


def captcha_page(ui: Ui) -> str:
    """A risk-control interstitial: a person must solve it; a tool must stop using the account."""
    return _page(
        f"{ui.title} - 安全验证",
        '<main class="risk"><h2>请完成安全验证</h2>'
        '<div class="captcha" id="captcha">拖动滑块完成拼图</div></main>',
    )


def rate_limited_page(ui: Ui) -> str:
    return _page(f"{ui.title}", '<main class="risk"><h2>请求过于频繁，请稍后再试</h2></main>')


_SCRIPT = r"""
<script>
const CFG = __CFG__;
const $ = (s) => document.querySelector(s);
let searchOn = false, ctrl = null;
function setSearch(on) {
  searchOn = on; const t = $('.toggle');
  if (t) t.setAttribute('aria-pressed', String(on));
}
document.addEventListener('click', (e) => {
  const t = e.target.closest('.toggle'); if (t) { setSearch(!searchOn); return; }
  if (e.target.closest('.menu')) { $('aside.sidebar').classList.toggle('open'); return; }
  if (e.target.closest('.stop')) { if (ctrl) ctrl.abort(); return; }
  if (e.target.closest('.send, .send-button, .btn-v2')) send();
});
function inputText() {
  const el = document.querySelector('.composer textarea, .composer [contenteditable]');
  return el ? (el.value !== undefined ? el.value : el.innerText) : '';
}
function clearInput() {
  const el = document.querySelector('.composer textarea, .composer [contenteditable]');
  if (el && el.value !== undefined) el.value = ''; else if (el) el.innerText = '';
}
function card(c) {
  const a = document.createElement('a'); a.className = 'citation-card'; a.href = c.url;
  a.target = '_blank'; a.rel = 'noopener'; a.dataset.index = c.index;
  a.textContent = '[' + c.index + '] ' + c.title; $('.citations').appendChild(a);
}
function queries(qs) { $('.queries').textContent = '搜索：' + qs.join(' / '); }
const parsers = {
  deepseek: (st, d) => {
    if (d.p === 'response/fragments' && d.o === 'APPEND') {
      for (const f of d.v) {
        if (f.type === 'SEARCH') {
          queries(f.queries);
          f.results.forEach(r => card({url: r.url, title: r.title, index: r.cite_index}));
        }
        if (f.type === 'RESPONSE') { st.text += f.content; }
      }
      st.path = null; return;
    }
    if (d.p) st.path = d.p;
    if (typeof d.v === 'string' && st.path && st.path.endsWith('/content')) st.text += d.v;
  },
  doubao: (st, d) => {
    for (const op of d.patch_op || []) for (const b of (op.patch_value || {}).content_block || []) {
      if (b.block_type === 10000) st.text += b.content.text_block.text;
      if (b.block_type === 10025) {
        const s = b.content.search_query_result_block; queries(s.queries);
        s.results.forEach(r => r.text_card && card(r.text_card));
      }
    }
  },
  kimi: (st, d) => {
    if (d.event === 'cmpl') st.text += d.text;
    if (d.event === 'search_plus' && d.msg.type === 'start_res') queries(d.msg.queries);
    if (d.event === 'search_plus' && d.msg.type === 'get_res') card(d.msg);
  },
};
async function send() {
  const q = inputText().trim(); if (!q) return;
  clearInput();
  const cid = CFG.cid || ('c' + Date.now().toString(36) + Math.random().toString(36).slice(2, 8));
  CFG.cid = cid;
  const u = document.createElement('div'); u.className = 'msg user'; u.textContent = q;
  $('.thread').appendChild(u);
  const stop = document.createElement('button'); stop.className = 'stop';
  stop.textContent = '停止生成';
  $('.composer').appendChild(stop);
  ctrl = new AbortController();
  const st = {text: '', path: null};
  const url = '/ui/' + CFG.platform + '/' + CFG.stream.replace('{cid}', cid);
  try {
    const resp = await fetch(url, {method: 'POST', signal: ctrl.signal,
      headers: {'content-type': 'application/json'},
      body: JSON.stringify({prompt: q, search_enabled: searchOn, conversation_id: cid})});
    if (resp.status === 401) { location.reload(); return; }
    if (resp.status === 403) { location.reload(); return; }
    const reader = resp.body.getReader(); const dec = new TextDecoder(); let buf = '';
    for (;;) {
      const {value, done} = await reader.read(); if (done) break;
      buf += dec.decode(value, {stream: true});
      let i; while ((i = buf.indexOf('\n\n')) >= 0) {
        const frame = buf.slice(0, i); buf = buf.slice(i + 2);
        for (const line of frame.split('\n')) if (line.startsWith('data: ')) {
          let d; try { d = JSON.parse(line.slice(6)); } catch (e) { continue; }
          parsers[CFG.platform](st, d); $('.answer').textContent = st.text;
        }
      }
    }
  } catch (e) { /* stopped or cut */ }
  finally { stop.remove(); ctrl = null; loadHistory(); }
}
async function loadHistory() {
  const r = await fetch('/ui/' + CFG.platform + '/api/conversations'); if (!r.ok) return;
  const list = await r.json(); const nav = $('.history'); nav.innerHTML = '';
  for (const c of list) {
    const a = document.createElement('a'); a.href = '/ui/' + CFG.platform + '/c/' + c.id;
    a.className = 'conversation'; a.dataset.id = c.id; a.textContent = c.title;
    nav.appendChild(a);
  }
}
loadHistory();
</script>
"""


def chat_page(
    platform: str,
    ui: Ui,
    account: str,
    *,
    changed: bool = False,
    conversation: dict[str, str] | None = None,
) -> str:
    """The chat page; ``conversation`` (question, answer) re-opens a past one from the sidebar."""
    input_html, send_html = (
        (CHANGED_INPUT, CHANGED_SEND) if changed else (ui.input_html, ui.send_html)
    )
    thread = ""
    if conversation:
        thread = f'<div class="msg user">{html.escape(conversation["question"])}</div>'
    answer = html.escape(conversation["answer"]) if conversation else ""
    cfg = {
        "platform": platform,
        "stream": ui.stream_path,
        "cid": conversation["id"] if conversation else None,
    }
    body = (
        f'<aside class="sidebar"><a class="new-chat" href="/ui/{platform}/">{ui.new_chat}</a>'
        f'<div class="account">{html.escape(account)}</div><nav class="history"></nav></aside>'
        f'<main><button class="menu" aria-label="菜单">☰</button><h1>{html.escape(ui.title)}</h1>'
        f'<div class="thread">{thread}</div><div class="queries"></div>'
        f'<div class="answer">{answer}</div><div class="citations"></div>'
        f'<div class="composer">{input_html}'
        '<button class="toggle" aria-pressed="false">联网搜索</button>'
        f"{send_html}</div></main>"
    )
    script = _SCRIPT.replace("__CFG__", json.dumps(cfg))
    return _page(ui.title, body, script)
