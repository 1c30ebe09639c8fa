// The page's entry point: the views and the router.
//
// Every feature is a module under views/ exporting `routes` (and `nav`, for a top-level
// section). A new feature — ACL tokens, intentions, config entries, a datacenter switcher
// — is one module and one entry in FEATURES, shown when the agent's settings say the
// feature exists (e.g. `settings.aclsEnabled`).

import { Router } from './router.js';
import { h, append } from './dom.js';
import * as services from './views/services.js';
import * as service from './views/service.js';
import * as nodes from './views/nodes.js';
import * as node from './views/node.js';
import * as kv from './views/kv.js';

const FEATURES = [services, service, nodes, node, kv];

const notFound = {
  title: 'Not found',
  mount(main, context) {
    append(main,
      h('h1', null, 'Page not found'),
      h('p', null, 'Nothing lives at this address. ', h('a', { href: context.href('services') }, 'Go to the services.')),
    );
  },
};

const router = new Router({
  routes: FEATURES.flatMap((feature) => feature.routes),
  navItems: FEATURES.filter((feature) => feature.nav).map((feature) => feature.nav),
  main: document.getElementById('main'),
  nav: document.getElementById('nav'),
  notFound,
});
router.start();
