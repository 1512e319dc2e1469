/* flexpipe-lab: a prebuilt JupyterLab extension written by hand (no npm build: it imports nothing).
 *
 * Why: JupyterLab's Run All on a notebook whose session has no kernel yet (the first seconds after
 * opening it, longer on a cold machine) starts a kernel of its own, racing the notebook's own start:
 * one of the two kernels is shut down mid-import and the cells are dropped without a word (or a
 * "Select Kernel" dialog waits). This plugin wraps the run commands (Lumino's command registry):
 * a run pressed while the notebook's kernel is not connected shows a status line on the notebook
 * ("waiting for the kernel"), waits until the kernel is connected, then runs: JupyterLab never sees
 * a notebook without a kernel, so it never starts a second one.
 *
 * Loaded as a federated extension: JupyterLab calls window._JUPYTERLAB[name].init(shareScope) and
 * .get("./extension") (webpack's module-federation container interface); nothing is shared.
 */
(function () {
  "use strict";
  var RUN_COMMANDS = ["notebook:run-all-cells", "notebook:run-cell", "notebook:run-cell-and-select-next",
                      "notebook:run-cell-and-insert-below", "notebook:run-all-below", "notebook:run-all-above",
                      "notebook:run-in-console", "runmenu:run", "runmenu:run-all"];
  var WAIT_MS = 600000;

  function sleep(ms) { return new Promise(function (r) { setTimeout(r, ms); }); }

  function kernelOf(widget) {
    var sc = widget && widget.sessionContext;
    return sc && sc.session ? sc.session.kernel : null;
  }

  function status(widget, text) {
    var node = widget.node.querySelector(".fp-kernel-wait");
    if (!node) {
      node = document.createElement("div");
      node.className = "fp-kernel-wait";
      node.setAttribute("role", "status");
      node.style.cssText = "position:absolute;top:4px;left:50%;transform:translateX(-50%);z-index:100;" +
        "background:#fff8d0;border:1px solid #d0b000;border-radius:4px;padding:4px 10px;" +
        "font:13px sans-serif;color:#333;box-shadow:0 1px 4px rgba(0,0,0,.2)";
      widget.node.appendChild(node);
    }
    node.textContent = text;
    return node;
  }

  function connected(widget) {
    var k = kernelOf(widget);
    return !!k && k.connectionStatus === "connected" && (k.status === "idle" || k.status === "busy");
  }

  async function waitForKernel(widget) {
    var node = status(widget, "Waiting for the Python kernel to start: your run starts when it is ready…");
    var t0 = Date.now();
    while (Date.now() - t0 < WAIT_MS && !widget.isDisposed && !connected(widget)) await sleep(250);
    if (connected(widget)) {
      node.remove();
    } else {
      node.textContent = "The kernel did not start (Kernel menu → Restart Kernel, then run again).";
      setTimeout(function () { node.remove(); }, 15000);
    }
  }

  function wrap(app, id) {
    var cmd = app.commands._commands && app.commands._commands.get(id);   // Lumino's registry
    if (!cmd || cmd.__fpWrapped) return false;
    var original = cmd.execute;
    cmd.execute = function (args) {
      var widget = app.shell.currentWidget;
      if (widget && widget.sessionContext && widget.content && !connected(widget)) {
        return waitForKernel(widget).then(function () { return original.call(void 0, args); });
      }
      return original.call(void 0, args);
    };
    cmd.__fpWrapped = true;
    return true;
  }

  var plugin = {
    id: "flexpipe-lab:run-waits-for-kernel",
    description: "A Run pressed before the notebook's kernel is up waits for it (and says so).",
    autoStart: true,
    activate: function (app) {
      function wrapAll() { RUN_COMMANDS.forEach(function (id) { wrap(app, id); }); }
      wrapAll();                       // commands registered before us
      app.restored.then(wrapAll);      // and those registered after us
      app.commands.commandChanged.connect(function (_, ev) {
        if (ev.type === "added" && RUN_COMMANDS.indexOf(ev.id) >= 0) wrap(app, ev.id);
      });
    }
  };

  var root = (window._JUPYTERLAB = window._JUPYTERLAB || {});
  root["flexpipe-lab"] = {
    init: function () { return Promise.resolve(); },
    get: function (module) {
      if (module !== "./extension") return Promise.reject(new Error("flexpipe-lab has no module " + module));
      return Promise.resolve(function () { return { __esModule: true, default: [plugin] }; });
    }
  };
})();
