// The cookie banner's buttons (pages.py): remember the choice for the session and take the banner away.
function consent(){document.cookie='consent=1; path=/';document.getElementById('cookie-banner').remove()}
