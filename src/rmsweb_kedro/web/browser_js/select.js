// Picks an option of a <select> by its visible text and fires input/change, as a person's choice would.
([id, label]) => {
  const el = document.querySelector(`[data-rms-id="${id}"]`);
  if (!el) return {missing: true};
  if (el.tagName !== 'SELECT') return {notSelect: true};
  const options = Array.from(el.options).map(o => o.text.trim());
  const index = options.indexOf(label);
  if (index < 0 || el.disabled) return {options, disabled: el.disabled};
  el.selectedIndex = index;
  el.dispatchEvent(new Event('input', {bubbles: true}));
  el.dispatchEvent(new Event('change', {bubbles: true}));
  return {options, selected: true};
}
