// tlc report's script. The page holds every view; this shows one at a time (the
// address says which: #ladder, #O2, #O2/k3 a kernel, #O2/op12 a model op, #O2/step4 a
// pass, #O2-passes a heading, #roofline, #fusion) and follows a selection from the graph to the kernel, its
// launches on the timeline and its point on the roofline, with the kernels of the
// other levels that compute the same model ops.
'use strict';

const data = JSON.parse(document.getElementById('report-data').textContent);
const views = [...document.querySelectorAll('section.view')];
const levelOf = id => document.getElementById('O' + id);
// A kernel's model ops; kernel -1 is a level's persistent kernel, which computes them all.
const opsOf = (level, kernel) => (kernel < 0 ? data.levels[level].all : data.levels[level].kernels[kernel]);

function selectKernel(level, kernel, op) {
  const section = levelOf(level);
  const ops = new Set(opsOf(level, kernel));
  section.querySelectorAll('article.kernel').forEach(a => { a.hidden = +a.dataset.kernel !== kernel; });
  section.querySelectorAll('.graph g.node').forEach(node => {
    const match = /-op(\d+)$/.exec(node.id);
    node.classList.toggle('selected', match !== null && ops.has(+match[1]));
    node.classList.toggle('focus', match !== null && +match[1] === op);
  });
  section.querySelectorAll('.graph g.cluster').forEach(box => {
    box.classList.toggle('selected', box.id.startsWith(`O${level}-k${kernel}-launch`));
  });
  section.querySelectorAll('rect.launch, table.kernels tr[data-kernel]').forEach(item => {
    item.classList.toggle('selected', +item.dataset.kernel === kernel);
  });
  section.querySelectorAll('mark.src').forEach(mark => { mark.classList.toggle('focus', +mark.dataset.op === op); });
  // The same model ops' kernels at every level, on the roofline and in its table.
  document.querySelectorAll('circle.point, table.points tr[data-level]').forEach(item => {
    const l = +item.dataset.level, k = +item.dataset.kernel;
    item.classList.toggle('selected', l === level && k === kernel);
    item.classList.toggle('linked', l !== level && opsOf(l, k).some(o => ops.has(o)));
  });
}

function showStep(stepper, index) {
  const steps = stepper.querySelectorAll('article.step');
  index = Math.max(0, Math.min(steps.length - 1, index));
  steps.forEach((step, i) => { step.hidden = i !== index; });
  stepper.querySelector('select').value = String(index);
}

function show(address) {
  const [view, item = ''] = address.replace(/^#/, '').split('/');
  const target = document.getElementById(view);  // a view, or a heading inside one
  const section = (target && target.closest('section.view')) || views[0];
  if (section.hidden) window.scrollTo(0, 0);
  views.forEach(v => { v.hidden = v !== section; });
  if (target && target !== section) target.scrollIntoView();
  document.querySelectorAll('nav a').forEach(a => {
    a.classList.toggle('current', a.getAttribute('href') === '#' + section.id);
  });
  const level = section.dataset.level;
  if (level === undefined) return;
  const number = +item.replace(/^\D+/, '');
  if (item.startsWith('k')) selectKernel(+level, number, null);
  if (item.startsWith('op') && number in data.levels[level].opKernel) {
    selectKernel(+level, data.levels[level].opKernel[number], number);
  }
  if (item.startsWith('step')) {
    const stepper = section.querySelector('.stepper');
    showStep(stepper, number);
    stepper.scrollIntoView();
  }
}

document.querySelectorAll('.stepper').forEach(stepper => {
  const select = stepper.querySelector('select');
  const changesOnly = stepper.querySelector('.changes-only');
  stepper.querySelector('.prev').addEventListener('click', () => showStep(stepper, +select.value - 1));
  stepper.querySelector('.next').addEventListener('click', () => showStep(stepper, +select.value + 1));
  select.addEventListener('change', () => showStep(stepper, +select.value));
  changesOnly.addEventListener('change', () => stepper.classList.toggle('changes-only', changesOnly.checked));
  stepper.classList.toggle('changes-only', changesOnly.checked);
  showStep(stepper, 0);
});
data.levels.forEach((level, index) => selectKernel(index, 0, null));
// A persistent kernel's task bars select their part's kernel.
document.querySelectorAll('rect.launch[data-tasks]').forEach(bar => bar.addEventListener('click', () => {
  location.hash = `#O${bar.closest('section.view').dataset.level}/k${bar.dataset.kernel}`;
}));
window.addEventListener('hashchange', () => show(location.hash));
show(location.hash);
