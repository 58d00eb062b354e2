/**
 * JupyterLab plugin "Model Serving Workbench": a launcher card, a command-palette entry and a
 * command (`workbench:open-dashboard`) that open the workbench dashboard in a Lab tab.
 *
 * The dashboard itself is served by the workbench server extension (workbench.jupyter) at
 * `{base_url}/workbench/`, behind Jupyter's own authentication; this plugin only frames that
 * page (same origin, so Jupyter's auth cookie and Bokeh's websocket work inside the frame).
 * The Lab packages imported here are JupyterLab's shared singletons: the prebuilt extension
 * does not bundle them (see `jupyter labextension build`).
 */
import { ILayoutRestorer } from '@jupyterlab/application';
import { ICommandPalette, MainAreaWidget, showErrorMessage, WidgetTracker } from '@jupyterlab/apputils';
import { PageConfig, URLExt } from '@jupyterlab/coreutils';
import { ILauncher } from '@jupyterlab/launcher';
import { ServerConnection } from '@jupyterlab/services';
import { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import iconSvg from '../style/workbench.svg';

/** The command that opens (or brings forward) the dashboard tab. */
export const COMMAND = 'workbench:open-dashboard';
/** The launcher card's and the tab's label. */
export const LABEL = 'Model Serving Workbench';
/** The dashboard's path under Jupyter's base URL (workbench.jupyter.routes.DASHBOARD_PATH). */
const DASHBOARD_PATH = 'workbench/';
/** The tab's DOM id: one dashboard tab per Lab window. */
const WIDGET_ID = 'workbench-dashboard';

const workbenchIcon = new LabIcon({ name: 'workbench:dashboard', svgstr: iconSvg });

/** The dashboard's URL for this Jupyter server (its base URL respected, e.g. under JupyterHub). */
function dashboardUrl() {
  return URLExt.join(PageConfig.getBaseUrl(), DASHBOARD_PATH);
}

/**
 * Why the dashboard cannot be shown, or null when the workbench server extension answers
 * `GET {base_url}/workbench/api/status` (the Lab extension can be installed without it).
 */
async function unavailableReason() {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, DASHBOARD_PATH, 'api', 'status');
  let response;
  try {
    response = await ServerConnection.makeRequest(url, {}, settings);
  } catch (error) {
    return `The Jupyter server did not answer: ${error}`;
  }
  if (response.status === 404) {
    return (
      'The workbench server extension is not running in this Jupyter server ' +
      '(`jupyter server extension list` should show workbench.jupyter enabled).'
    );
  }
  if (!response.ok) {
    return `${url} answered ${response.status} ${response.statusText}`;
  }
  return null;
}

/**
 * The dashboard page in a frame. Not sandboxed: the page is the Jupyter server's own, same
 * origin (Jupyter's auth cookie, XSRF token and Bokeh's websocket all need that), and a
 * sandbox that allows both scripts and the same origin would protect nothing.
 */
function createDashboard() {
  const frame = document.createElement('iframe');
  frame.src = dashboardUrl();
  frame.title = LABEL;
  frame.referrerPolicy = 'same-origin';
  const content = new Widget({ node: document.createElement('div') });
  content.node.appendChild(frame);
  content.addClass('jp-WorkbenchDashboard');
  const widget = new MainAreaWidget({ content });
  widget.id = WIDGET_ID;
  widget.title.label = LABEL;
  widget.title.caption = 'Models, config editor, live statistics and tuning of the workbench engine';
  widget.title.icon = workbenchIcon;
  widget.title.closable = true;
  return widget;
}

const plugin = {
  id: '@workbench/jupyterlab:launcher',
  description: 'Opens the Model Serving Workbench dashboard in a JupyterLab tab.',
  autoStart: true,
  optional: [ILauncher, ICommandPalette, ILayoutRestorer],
  activate: (app, launcher, palette, restorer) => {
    const tracker = new WidgetTracker({ namespace: 'workbench-dashboard' });

    app.commands.addCommand(COMMAND, {
      label: LABEL,
      caption: 'Open the Model Serving Workbench dashboard in a tab',
      icon: workbenchIcon,
      execute: async () => {
        let widget = tracker.currentWidget;
        if (!widget || widget.isDisposed) {
          const reason = await unavailableReason();
          if (reason) {
            await showErrorMessage(LABEL, reason);
            return null;
          }
          widget = createDashboard();
          void tracker.add(widget);
        }
        if (!widget.isAttached) {
          app.shell.add(widget, 'main');
        }
        app.shell.activateById(widget.id);
        return widget;
      }
    });

    if (launcher) {
      launcher.add({ command: COMMAND, category: 'Other', rank: 0 });
    }
    if (palette) {
      palette.addItem({ command: COMMAND, category: 'Model Serving' });
    }
    if (restorer) {
      void restorer.restore(tracker, { command: COMMAND, name: () => WIDGET_ID });
    }
  }
};

export default plugin;
