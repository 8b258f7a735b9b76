// Walks the visible DOM once: numbers interactive elements 1, 2, 3... in DOM order (tagging them with
// data-rms-id so actions find them) and keeps headings and short own-text of other elements.
(maxChars) => {
  const clean = s => (s || '').replace(/\s+/g, ' ').trim().slice(0, maxChars);
  const roleOf = el => {
    const t = el.tagName;
    if (t === 'A' && el.hasAttribute('href')) return 'link';
    if (t === 'BUTTON') return 'button';
    if (t === 'SELECT') return 'combobox';
    if (t === 'TEXTAREA') return 'textbox';
    if (t === 'INPUT') {
      const ty = (el.type || 'text').toLowerCase();
      if (ty === 'hidden') return null;
      if (ty === 'checkbox' || ty === 'radio') return ty;
      if (['submit', 'button', 'reset'].includes(ty)) return 'button';
      return 'textbox';
    }
    return null;
  };
  const visible = el => {
    if (!el.getClientRects().length) return false;
    const s = getComputedStyle(el);
    return s.visibility !== 'hidden' && s.display !== 'none';
  };
  const nameOf = el => clean(el.getAttribute('aria-label'))
    || (el.labels && el.labels.length ? clean(Array.from(el.labels[0].childNodes)
        .filter(n => n.nodeType === 3).map(n => n.textContent).join(' ')) : '')
    || clean(el.getAttribute('placeholder')) || clean(el.innerText) || clean(el.value) || clean(el.getAttribute('title'));
  document.querySelectorAll('[data-rms-id]').forEach(e => e.removeAttribute('data-rms-id'));
  const items = [];
  let n = 0;
  const walk = node => {
    for (const el of node.children) {
      if (['SCRIPT', 'STYLE', 'OPTION', 'HEAD', 'TITLE'].includes(el.tagName) || !visible(el)) continue;
      const role = roleOf(el);
      if (role) {
        n += 1;
        el.setAttribute('data-rms-id', String(n));
        let value = null;
        if (role === 'combobox') value = el.selectedOptions.length ? clean(el.selectedOptions[0].text) : '';
        else if (role === 'textbox') value = el.value;
        else if (role === 'checkbox' || role === 'radio') value = el.checked ? 'true' : 'false';
        const r = el.getBoundingClientRect();
        items.push({kind: 'element', id: n, role, name: nameOf(el), value, tag: el.tagName.toLowerCase(),
                    bbox: [r.x + scrollX, r.y + scrollY, r.width, r.height]});
        continue;
      }
      if (/^H[1-3]$/.test(el.tagName)) { items.push({kind: 'heading', text: clean(el.innerText)}); continue; }
      if (el.tagName !== 'LABEL') {
        const own = clean(Array.from(el.childNodes).filter(c => c.nodeType === 3).map(c => c.textContent).join(' '));
        if (own) items.push({kind: 'text', text: own});
      }
      walk(el);
    }
  };
  walk(document.body || document.documentElement);
  return {items, title: document.title, scroll: [scrollX, scrollY]};
}
