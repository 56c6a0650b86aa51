// bootvol admin: live updates for the nodes list and a node's page, over /admin/stream
// (server-sent events, src/admin/live.rs). A progressive enhancement: without it the pages work
// by reload. No framework; text only ever goes in as text (textContent), never as HTML.
(function () {
  'use strict';
  var me = document.currentScript;
  if (!me || !window.EventSource || !window.JSON) return;
  var node = me.getAttribute('data-node') || '';
  var name = me.getAttribute('data-name') || '';
  var url = '/admin/stream?gen=' + encodeURIComponent(me.getAttribute('data-gen') || '') +
    (node ? '&node=' + encodeURIComponent(node) : '');

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }
  function mark(e) {
    if (!e) return;
    e.classList.add('changed');
    setTimeout(function () { e.classList.remove('changed'); }, 4000);
  }

  var status = el('p', 'hint', 'Live: connecting…');
  status.id = 'live-status';
  // Polite, not role=status: the page's own message (a form's outcome) keeps that role.
  status.setAttribute('aria-live', 'polite');
  var main = document.getElementById('main');
  if (main) main.insertBefore(status, main.firstChild);
  function say(text) { status.textContent = text; }

  // A row of the nodes list.
  function row(n) {
    var tr = document.querySelector('tr[data-node="' + n.uuid + '"]');
    if (!tr) return;
    var power = tr.querySelector('td.power'), state = tr.querySelector('td.state');
    var scenario = tr.querySelector('td.scenario'), error = tr.querySelector('td.clip');
    if (power) power.textContent = n.power || 'unknown';
    if (state) {
      state.textContent = n.provision + (n.heading_to ? ' → ' + n.heading_to : '');
      if (n.drift) { state.appendChild(document.createTextNode(' ')); state.appendChild(el('span', 'warn', 'drift')); }
    }
    if (scenario) {
      scenario.textContent = n.scenario;
      if (n.boot_problem) { scenario.appendChild(document.createTextNode(' ')); scenario.appendChild(el('span', 'bad', 'not bootable: ' + n.boot_problem)); }
      if (n.boot_failed) { scenario.appendChild(document.createTextNode(' ')); scenario.appendChild(el('span', 'bad', 'last boot failed: ' + n.boot_failed)); }
    }
    if (error) error.textContent = n.error_line || '';
    var named = tr.children[1], flag = named && named.querySelector('span.warn');
    if (named && !n.maintenance && flag) named.removeChild(flag);
    if (named && n.maintenance && !flag) { named.appendChild(document.createTextNode(' ')); named.appendChild(el('span', 'warn', 'maintenance')); }
    var bad = n.provision === 'deploy failed' || n.provision === 'error' || n.drift || n.boot_problem || n.boot_failed;
    tr.classList.toggle('bad', !!bad);
    mark(tr);
  }

  // The summary table of a node's page (its rows marked, its cells' markup kept plain).
  function cell(id, text) {
    var td = document.querySelector('#' + id + ' td');
    if (td && td.textContent !== text) { td.textContent = text; mark(td.parentNode); }
  }
  function page(n) {
    if (n.uuid !== node) return;
    cell('node-power', n.power || 'unknown');
    cell('node-provision', n.provision);
    cell('node-scenario', n.scenario + (n.boot_problem ? ' (not bootable: ' + n.boot_problem + ')' : ''));
    cell('node-maintenance', n.maintenance ? 'yes' : 'no');
    cell('node-last-error', n.last_error || '');
    // The actions that fit and the banners are the server's to say: a page with an action
    // running reloads itself already (its meta refresh); this one says a reload shows them.
    say('Live: updated ' + new Date().toLocaleTimeString() + (n.heading_to ? ', heading to ' + n.heading_to : '') +
      '. Reload for the actions that fit now.');
  }

  var ATTENTION = [
    ['failed', '/admin/?state=deploy%20failed', 'deploy failed'],
    ['error', '/admin/?state=error', 'in error'],
    ['maintenance', '/admin/?maintenance=1', 'in maintenance'],
    ['drift', '/admin/?drift=1', 'with volume drift'],
    ['not_bootable', '/admin/?q=not%20bootable', 'not bootable'],
    ['boot_failed', '/admin/?q=last%20boot%20failed', 'whose last boot failed'],
    ['unknown_macs', '#unknown-macs', 'unknown MAC(s) booting']
  ];
  function attention(a) {
    var section = document.getElementById('attention');
    if (!section) return;
    var p = el('p', 'warning');
    p.appendChild(el('strong', '', 'Needs attention:'));
    var any = false;
    ATTENTION.forEach(function (k) {
      if (!a[k[0]]) return;
      any = true;
      var link = el('a');
      link.href = k[1];
      link.appendChild(el('span', 'n', String(a[k[0]])));
      link.appendChild(document.createTextNode(' ' + k[2]));
      p.appendChild(document.createTextNode(' '));
      p.appendChild(link);
    });
    if (!any) p = el('p', 'good', 'Nothing needs attention.');
    section.textContent = '';
    section.appendChild(p);
    mark(p);
  }

  function boot(b) {
    var text = b.at + ' ' + b.via + ' ' + b.client + (b.mac ? ' ' + b.mac : '') +
      (b.node ? ' (' + b.node + ')' : '') + ': ' + b.result + (b.detail ? ': ' + b.detail : '');
    if (node) {
      if (b.node !== name) return;
      var body = document.querySelector('#boots tbody');
      if (!body) return;
      var tr = el('tr', b.failed ? 'bad' : '');
      [b.at, b.via, b.client, b.mac || '', b.result + (b.detail ? ': ' + b.detail : '')].forEach(function (t, i) {
        tr.appendChild(el('td', i === 4 ? 'result' : '', t));
      });
      body.insertBefore(tr, body.firstChild);
      mark(tr);
      return;
    }
    var list = document.getElementById('live-boots');
    if (!list) {
      var at = document.getElementById('activity');
      if (!at) return;
      list = el('ol', '');
      list.id = 'live-boots';
      list.setAttribute('aria-label', 'Boot requests as they happen');
      at.parentNode.insertBefore(list, at.nextSibling);
    }
    var item = el('li', b.failed ? 'bad' : '', text);
    list.insertBefore(item, list.firstChild);
    while (list.children.length > 10) list.removeChild(list.lastChild);
  }

  var source = new EventSource(url);
  function on(kind, f) {
    source.addEventListener(kind, function (e) {
      try { f(JSON.parse(e.data)); } catch (err) { /* one bad event does not stop the rest */ }
    });
  }
  source.onopen = function () { say('Live: this page updates itself.'); };
  source.onerror = function () {
    say(source.readyState === EventSource.CLOSED ? 'Live updates stopped: reload the page.' : 'Live: reconnecting…');
  };
  on('node', function (n) { if (node) page(n); else row(n); });
  on('gone', function (g) {
    var tr = document.querySelector('tr[data-node="' + g.uuid + '"]');
    if (tr) { tr.classList.add('bad'); mark(tr); }
    if (g.uuid === node) say('Live: this node was deleted.');
  });
  on('attention', attention);
  on('boot', boot);
  on('end', function (e) {
    source.close();
    say(e.reason === 'replaced' ? 'Live updates moved to a newer page of this session: reload to have them here.'
      : 'Live updates ended (' + e.reason + '): reload the page.');
  });
})();
