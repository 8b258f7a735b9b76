// What Playwright's fill does: value-typed inputs (date, time...) get their value set with input/change
// events; text fields are focused with their content selected, so that typed text replaces it.
([id, text]) => {
  const el = document.querySelector(`[data-rms-id="${id}"]`);
  if (!el) return 'missing';
  const kind = el.tagName === 'INPUT' ? (el.type || 'text').toLowerCase() : null;
  if (el.tagName !== 'TEXTAREA' && kind === null && !el.isContentEditable)
    return 'is not an <input>, <textarea> or [contenteditable] element';
  if (['checkbox', 'radio', 'button', 'submit', 'reset', 'file', 'image', 'hidden'].includes(kind))
    return `is an <input type=${kind}>, which cannot be typed into`;
  if (el.disabled || el.readOnly) return 'is not editable';
  el.focus();
  if (['date', 'time', 'datetime-local', 'month', 'week', 'color', 'range'].includes(kind)) {
    el.value = text;
    if (el.value !== text) return `does not accept "${text}" (an <input type=${kind}>)`;
    el.dispatchEvent(new Event('input', {bubbles: true}));
    el.dispatchEvent(new Event('change', {bubbles: true}));
    return 'filled';
  }
  if (el.isContentEditable) getSelection().selectAllChildren(el); else el.select();
  return 'focused';
}
