// The official JavaScript client (@kubernetes/client-node) against `wasmpod serve`
// (KUBECONFIG names it). Run by cli/tests/serve/clients.rs with Node; WASMPOD_K8S_JS is the client's
// entry point in the node_modules tools/test-deps.sh makes. Prints one JSON object of what
// each call gave. The pod `web` runs `http-server` on 8080 and a `shell` container to exec in,
// `echo` (stdin: true) to attach to.
import { PassThrough } from 'node:stream';
import { pathToFileURL } from 'node:url';

const k8s = await import(pathToFileURL(process.env.WASMPOD_K8S_JS).href);
const kc = new k8s.KubeConfig();
kc.loadFromDefault();
const core = kc.makeApiClient(k8s.CoreV1Api);
const seen = {};
const within = (ms, promise, what) =>
    Promise.race([promise, new Promise((_, no) => setTimeout(() => no(new Error(`${what}: no end within ${ms} ms`)), ms))]);

// typed list
const pods = await core.listNamespacedPod({ namespace: 'default' });
seen.pods = pods.items.map((p) => p.metadata.name);

// a watch from the list's resourceVersion: the pod created after it arrives as ADDED
const watched = new Promise((resolve, reject) => {
    const watch = new k8s.Watch(kc);
    watch
        .watch(
            '/api/v1/namespaces/default/configmaps',
            { resourceVersion: pods.metadata.resourceVersion },
            (type, object) => {
                resolve(`${type} ${object.metadata.name}`);
            },
            (err) => err && reject(err),
        )
        .then((req) => watched.finally(() => req.abort()))
        .catch(reject);
});
await core.createNamespacedConfigMap({
    namespace: 'default',
    body: { metadata: { name: 'from-js' }, data: { a: 'b' } },
});
seen.watch = await within(30000, watched, 'watch');

// exec with stdin: binary frames in, the end of stdin as v5's close of channel 0
const exec = new k8s.Exec(kc);
let stdout = '';
const out = new PassThrough();
out.on('data', (d) => (stdout += d));
const input = new PassThrough();
const status = await within(
    30000,
    new Promise((resolve, reject) => {
        exec.exec('default', 'web', 'shell', ['agnhost', 'stdin'], out, null, input, false, resolve)
            .then(() => input.end('first\nsecond\n'))
            .catch(reject);
    }),
    'exec',
);
seen.exec_status = status.status;
seen.exec_stdout = stdout;

// attach with stdin: the container's output from its start, then its answer; the session is
// closed once the answer came back (an attach does not end by itself)
let attached = '';
const attach_out = new PassThrough();
const attach_in = new PassThrough();
const answered_attach = new Promise((resolve) => {
    attach_out.on('data', (d) => {
        attached += d;
        if (attached.includes('read: from javascript\n')) resolve();
    });
});
const attach_ws = await new k8s.Attach(kc).attach('default', 'web', 'echo', attach_out, null, attach_in, false);
attach_in.write('from javascript\n');
await within(30000, answered_attach, 'attach');
attach_ws.close();
seen.attach_stdout = attached;

// port-forward over the WebSocket channel protocol
const forward = new k8s.PortForward(kc);
let answer = '';
const from_pod = new PassThrough();
const to_pod = new PassThrough();
const answered = new Promise((resolve) => {
    from_pod.on('data', (d) => {
        answer += d;
        if (answer.includes('\r\n\r\n')) resolve();
    });
});
const ws = await forward.portForward('default', 'web', [8080], from_pod, null, to_pod);
to_pod.write('GET /javascript HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n');
await within(30000, answered, 'port-forward');
seen.forward = answer.split('\r\n')[0];
ws.close();

// an error as a Status
try {
    await core.readNamespacedPod({ name: 'nowhere', namespace: 'default' });
} catch (e) {
    seen.missing = { code: e.code, reason: JSON.parse(e.body).reason };
}

console.log(JSON.stringify(seen));
process.exit(0);
