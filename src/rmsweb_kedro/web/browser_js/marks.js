// Set-of-marks: draws each numbered element's box and id label over the page for the screenshot.
() => {
  document.querySelectorAll('[data-rms-id]').forEach(el => {
    const r = el.getBoundingClientRect();
    const m = document.createElement('div');
    m.className = '__rms_mark';
    m.textContent = el.getAttribute('data-rms-id');
    m.style.cssText = `position:fixed;left:${r.x}px;top:${Math.max(0, r.y - 14)}px;background:#e0245e;color:#fff;`
      + 'font:bold 11px monospace;padding:0 3px;z-index:2147483647;pointer-events:none';
    const box = document.createElement('div');
    box.className = '__rms_mark';
    box.style.cssText = `position:fixed;left:${r.x}px;top:${r.y}px;width:${r.width}px;height:${r.height}px;`
      + 'outline:2px solid #e0245e;z-index:2147483646;pointer-events:none';
    document.body.append(box, m);
  });
}
