// Element actions run as a pointer and keyboard would, without Playwright's locator machinery (its injected
// script costs ~50-85 ms an action on 2 cores, half a step): one call brings element `id` into view and tells
// where a pointer reaches it, or what covers it (a fixed banner, a dialog).
(id) => {
  const el = document.querySelector(`[data-rms-id="${id}"]`);
  if (!el) return null;
  const probe = () => {
    const r = el.getBoundingClientRect();
    const x = r.x + r.width / 2, y = r.y + r.height / 2;
    const hit = document.elementFromPoint(x, y);
    const reached = !!hit && (hit === el || el.contains(hit)
      || Array.from(el.labels || []).some(label => label.contains(hit)));
    const inView = r.top >= 0 && r.left >= 0 && r.bottom <= innerHeight && r.right <= innerWidth;
    return {x, y, hit, reached, inView, size: r.width * r.height};
  };
  let at = probe();
  if (!at.reached || !at.inView) { el.scrollIntoView({block: 'center', inline: 'center'}); at = probe(); }
  const describe = node => {
    const owner = node.closest('[data-rms-id]') || node;
    const text = (owner.getAttribute('aria-label') || owner.innerText || '').replace(/\s+/g, ' ').trim();
    return `<${owner.tagName.toLowerCase()}${owner.id ? ' id=' + owner.id : ''}> "${text.slice(0, 60)}"`;
  };
  return {
    x: at.x, y: at.y,
    visible: at.size > 0,
    coveredBy: at.reached || !at.hit ? null : describe(at.hit),
    disabled: !!el.disabled,
    opensTab: (el.closest('a[target], form[target]') || {}).target === '_blank',
  };
}
