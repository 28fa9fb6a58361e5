// Building the page's elements. Text only ever goes in as text nodes (never parsed as markup):
// sandbox names, images, process names and output come from sandboxes, which are hostile.

type Child = Node | string | null | undefined | false;

interface Props {
  class?: string;
  attrs?: Record<string, string>;
  on?: Record<string, (e: Event) => void>;
}

/** An element with a class, attributes (set as values, never parsed), listeners and children. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Props = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  if (props.class) el.className = props.class;
  for (const [k, v] of Object.entries(props.attrs ?? {})) el.setAttribute(k, v);
  for (const [k, f] of Object.entries(props.on ?? {})) el.addEventListener(k, f);
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c); // a string becomes a text node
  }
  return el;
}

/** A button that runs `action` on click. */
export function button(label: string, action: () => void, cls = ""): HTMLButtonElement {
  return h("button", { class: cls, attrs: { type: "button" }, on: { click: () => action() } }, label);
}

/** Replaces every child of `parent`. */
export function replaceChildren(parent: Element, ...children: Child[]): void {
  parent.replaceChildren(...children.filter((c): c is Node | string => !!c));
}

/** Asks the person to confirm (a modal <dialog>); resolves true for the confirm button. */
export function confirmDialog(message: string, confirmLabel: string): Promise<boolean> {
  return new Promise((resolve) => {
    const dialog = h("dialog", { class: "confirm" });
    const done = (ok: boolean) => {
      dialog.close();
      dialog.remove();
      resolve(ok);
    };
    dialog.append(
      h("p", {}, message),
      h(
        "div",
        { class: "buttons" },
        button("Cancel", () => done(false)),
        button(confirmLabel, () => done(true), "danger"),
      ),
    );
    dialog.addEventListener("cancel", () => done(false)); // Escape
    document.body.append(dialog);
    dialog.showModal();
  });
}

/** "12 s", "5 min", "3 h", "2 d". */
export function formatAge(seconds: number): string {
  if (seconds < 60) return `${Math.max(0, Math.floor(seconds))} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h`;
  return `${Math.floor(seconds / 86400)} d`;
}

/** "45.2 MiB", "1.5 GiB". */
export function formatBytes(bytes: number): string {
  if (bytes >= 1 << 30) return `${(bytes / (1 << 30)).toFixed(1)} GiB`;
  return `${(bytes / (1 << 20)).toFixed(1)} MiB`;
}
