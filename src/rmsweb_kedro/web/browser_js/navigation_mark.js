// An init script: marks a document that is about to be replaced (form submission, same-tab link, script
// submit), so the env waits for the next document instead of snapshotting the old one; a cancelled submit or
// click clears the mark.
(() => {
  const mark = () => { window.__rmsNavigating = true; };
  const submit = HTMLFormElement.prototype.submit;
  HTMLFormElement.prototype.submit = function () { mark(); return submit.call(this); };
  document.addEventListener('submit', mark, true);
  document.addEventListener('click', e => {
    const a = e.target.closest && e.target.closest('a[href]');
    if (a && (!a.target || a.target === '_self') && a.protocol.startsWith('http')
        && !(a.hash && a.pathname === location.pathname)) mark();
  }, true);
  const unmarkIfCancelled = e => { if (e.defaultPrevented) window.__rmsNavigating = false; };
  window.addEventListener('submit', unmarkIfCancelled);
  window.addEventListener('click', unmarkIfCancelled);
})();
