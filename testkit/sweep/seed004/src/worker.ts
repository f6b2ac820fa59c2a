// Runs until it is stopped: the debugger attaches to it.
setInterval(() => {}, 1000);
