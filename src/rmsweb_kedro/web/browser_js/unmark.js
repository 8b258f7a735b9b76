// Removes the set-of-marks labels again after the screenshot.
() => document.querySelectorAll('.__rms_mark').forEach(m => m.remove())
