// What tells whether a page refuses the browser (web/browser.py block_kind decides from it): a challenge widget that
// is shown (rendered, of real size, on the page: not a 0x0, parked offscreen, hidden or badge-only one), a vendor's
// interstitial markup, visible password fields, and how much content of its own the page has outside challenges,
// sign-in cards, site chrome (nav, banner, contentinfo) and overlays (fixed or sticky boxes, dialogs).
() => {
  // The smallest side of a challenge a person can solve (reCAPTCHA's checkbox is 304x78, Turnstile's 300x65).
  const MIN_SIDE = 40;
  const widgets = [
    // reCAPTCHA's checkbox (anchor) and image challenge (bframe) frames; an invisible one's anchor says size=invisible
    ['recaptcha', 'iframe[src*="/recaptcha/"]:not([src*="size=invisible"])'],
    ['recaptcha', '.g-recaptcha:not(button):not(input):not(a):not([data-size="invisible"])'],
    ['hcaptcha', 'iframe[src*="hcaptcha.com"]'],
    ['hcaptcha', '.h-captcha:not(button):not(input):not(a):not([data-size="invisible"])'],
    ['turnstile', 'iframe[src*="challenges.cloudflare.com"]'],
    ['turnstile', '.cf-turnstile'],
    ['arkose', 'iframe[src*="arkoselabs"], iframe[src*="funcaptcha"], #FunCaptcha'],
    ['datadome', 'iframe[src*="captcha-delivery.com"]'],
    ['perimeterx', '#px-captcha'],
    ['captcha', '#captcha, img[src*="captcha" i]'],
  ];
  // Markup only a vendor's challenge or refusal page carries (not the scripts some vendors put on every page).
  const interstitials = [
    ['cloudflare', '#challenge-form, #challenge-running, #challenge-stage, #cf-challenge-running, #cf-please-wait, ' +
      '.cf-browser-verification, #cf-error-details'],
    ['akamai', '#sec-if-cpt-container, iframe#sec-cpt-if, iframe[src*="/_sec/cp_challenge/"]'],
    ['perimeterx', '#px-captcha, script[src*="/captcha/captcha.js"][src*="px"]'],
    ['datadome', 'script[src*="captcha-delivery.com"]'],
    ['imperva', 'iframe[src*="_Incapsula_Resource"], script[src*="_Incapsula_Resource"]'],
  ];
  const styled = (el) => el.checkVisibility({
    opacityProperty: true, visibilityProperty: true, checkOpacity: true, checkVisibilityCSS: true,
  });
  const root = document.documentElement;
  const pageHeight = Math.max(root.scrollHeight, document.body ? document.body.scrollHeight : 0);
  const shown = (el) => {
    if (!styled(el)) return false;
    const box = el.getBoundingClientRect();
    if (box.width < MIN_SIDE || box.height < MIN_SIDE) return false;
    // Most of it inside the viewport's width and the document's height (a challenge parked at top:-10000px or a
    // badge slid off the right edge is not in the way).
    const width = Math.min(box.right, innerWidth) - Math.max(box.left, 0);
    const height = Math.min(box.bottom, pageHeight - scrollY) - Math.max(box.top, -scrollY);
    return width > 0 && height > 0 && width * height >= 0.5 * box.width * box.height;
  };
  const found = [];
  for (const [vendor, selector] of widgets) {
    for (const el of document.querySelectorAll(selector)) {
      if (!el.closest('.grecaptcha-badge') && shown(el)) found.push([vendor, el]);
    }
  }
  // A widget drawn over the page (fixed, or stacked with a z-index of 1000 or more, as image challenges are) or
  // covering a quarter of the viewport is in the way whatever the page holds; one inline in a form (a comment
  // form's checkbox under an article) is in the way only of a page with little else (block_kind decides).
  const over = (el) => {
    const box = el.getBoundingClientRect();
    const width = Math.max(0, Math.min(box.right, innerWidth) - Math.max(box.left, 0));
    const height = Math.max(0, Math.min(box.bottom, innerHeight) - Math.max(box.top, 0));
    if (width * height >= 0.25 * innerWidth * innerHeight) return true;
    for (let up = el; up && up !== root; up = up.parentElement) {
      const style = getComputedStyle(up);
      if (style.position === 'fixed' || (style.position !== 'static' && Number(style.zIndex) >= 1000)) return true;
    }
    return false;
  };
  const interstitial = interstitials.find(([, selector]) => document.querySelector(selector) !== null);

  const passwords = [...document.querySelectorAll('input[type="password"]')].filter((el) => {
    const box = el.getBoundingClientRect();
    return styled(el) && box.width > 0 && box.height > 0;
  });
  // A password field's sign-in box: its form, or the nearest ancestor holding a button (forms without <form>, and
  // a form of more than FORM_MAX characters: one that wraps the whole page, as ASP.NET's do); then the card around
  // it, while an ancestor adds less than CARD_EXTRA characters of text (a logo, a heading, "Lost your password?",
  // "Create an account"), not the page's content beside it.
  const FORM_MAX = 300;
  const CARD_EXTRA = 100;
  const textOf = (el) => el.innerText.replace(/\s+/g, ' ').trim().length;
  const signIn = passwords.map((el) => {
    let box = el.closest('form, [role="form"]');
    if (!box || textOf(box) > FORM_MAX) {
      box = el.parentElement;
      while (box !== document.body && !box.querySelector('button, input[type="submit"]')) box = box.parentElement;
      if (box === document.body) box = el.parentElement;
    }
    const inner = textOf(box);
    const page = [document.body, root];
    for (let up = box.parentElement; up && !page.includes(up) && textOf(up) - inner < CARD_EXTRA; up = up.parentElement) {
      box = up;
    }
    return box;
  });
  // The widgets and their forms (the box to type a captcha's characters in, its button) are the challenge's.
  const excluded = new Set([...found.flatMap(([, el]) => [el, el.closest('form') || el]), ...signIn]);
  const CHROME = 'nav, [role="navigation"], [role="banner"], [role="contentinfo"], dialog, [role="dialog"], ' +
    '[role="alertdialog"], [aria-modal="true"]';
  const outside = new Map(); // element -> whether it is outside every excluded region (memo over ancestors)
  const own = (el) => {
    if (!el || el === document.body || el === root) return true;
    if (outside.has(el)) return outside.get(el);
    const tag = el.tagName;
    let mine = !excluded.has(el) && !el.matches(CHROME) &&
      !['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE'].includes(tag) &&
      // a page's own header and footer are chrome; an article's are its content
      !((tag === 'HEADER' || tag === 'FOOTER') && !el.parentElement.closest('main, article, section'));
    if (mine) {
      const position = getComputedStyle(el).position;
      mine = position !== 'fixed' && position !== 'sticky' && own(el.parentElement);
    }
    outside.set(el, mine);
    return mine;
  };
  const parts = [];
  let chars = 0;
  if (document.body) {
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(), seen = 0; node && seen < 20000; node = walker.nextNode(), seen += 1) {
      const words = node.nodeValue.replace(/\s+/g, ' ').trim();
      const parent = node.parentElement;
      if (words && parent && own(parent) && styled(parent)) {
        chars += words.length;
        if (chars <= 3000) parts.push(words);
      }
    }
  }
  const controls = [...document.querySelectorAll(
    'a[href], button, input:not([type="hidden"]), select, textarea',
  )].filter((el) => own(el) && styled(el) && el.getBoundingClientRect().width > 0).length;
  const navigation = performance.getEntriesByType('navigation')[0];
  return {
    title: document.title || '',
    status: navigation && navigation.responseStatus ? navigation.responseStatus : null,
    widget: found.length ? found[0][0] : null,
    overlay: found.some(([, el]) => over(el)),
    interstitial: interstitial ? interstitial[0] : null,
    passwordFields: passwords.length,
    ownChars: chars,
    ownControls: controls,
    text: parts.join(' ').slice(0, 3000),
  };
}
