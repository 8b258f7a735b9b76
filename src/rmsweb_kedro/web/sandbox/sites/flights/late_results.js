// On a fresh search the results appear late, as on real travel sites (pages.py): the element that appears late.
setTimeout(()=>{document.getElementById('results').hidden=false;document.getElementById('loading').remove()},800)
