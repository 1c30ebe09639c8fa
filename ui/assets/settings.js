// The agent's settings for this page. The agent writes them as JSON into the
// <meta name="praetor-ui/settings"> tag of index.html when it starts; a page served from a
// directory of one's own (-ui-dir) without that tag gets the defaults below.

function meta(name) {
  const element = document.querySelector(`meta[name="praetor-ui/${name}"]`);
  return element ? element.content : '';
}

function parse(text) {
  try {
    const value = JSON.parse(text);
    return value && typeof value === 'object' ? value : {};
  } catch {
    return {};
  }
}

const raw = parse(meta('settings'));

export const settings = Object.freeze({
  contentPath: typeof raw.ContentPath === 'string' ? raw.ContentPath : '/ui/',
  datacenter: raw.Datacenter || 'dc1',
  nodeName: raw.NodeName || '',
  aclsEnabled: raw.ACLsEnabled === true,
  metricsProvider: raw.MetricsProvider || '',
  dashboardTemplates: Object.freeze({ ...(raw.DashboardURLTemplates || {}) }),
  consulVersion: raw.ConsulVersion || '',
  praetorVersion: raw.PraetorVersion || '',
});
