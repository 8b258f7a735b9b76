// What tells a page that refuses the browser (web/browser.py block_kind): captcha and anti-bot widgets, the
// visible password fields of a login form, the page's size in interactive elements and its opening text.
() => {
  const visible = (el) => {
    const box = el.getBoundingClientRect();
    const style = getComputedStyle(el);
    return box.width > 0 && box.height > 0 && style.visibility !== 'hidden' && style.display !== 'none';
  };
  const widgets = [
    '.g-recaptcha', '.h-captcha', '.cf-turnstile', '#cf-challenge-running', '#challenge-form',
    '#challenge-running', '#px-captcha', '#captcha', '[data-sitekey]',
    'iframe[src*="recaptcha"]', 'iframe[src*="hcaptcha"]', 'iframe[src*="challenges.cloudflare.com"]',
    'iframe[src*="arkoselabs"]', 'iframe[src*="funcaptcha"]', 'iframe[src*="captcha-delivery"]',
  ];
  const body = document.body;
  return {
    title: document.title || '',
    captchaWidget: widgets.some((selector) => document.querySelector(selector) !== null),
    passwordFields: [...document.querySelectorAll('input[type="password"]')].filter(visible).length,
    interactive: [...document.querySelectorAll('a[href], button, input, select, textarea')].filter(visible).length,
    text: body ? body.innerText.slice(0, 3000) : '',
  };
}
