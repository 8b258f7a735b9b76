// The numbered element under a page point (page pixels), or null.
([x, y]) => {
  const el = document.elementFromPoint(x - scrollX, y - scrollY);
  const target = el && el.closest('[data-rms-id]');
  return target ? Number(target.getAttribute('data-rms-id')) : null;
}
