// The app's entry point: checks a request for each user it knows.
import { User } from "./types";
import { validateToken, validateUser } from "./auth";

export function serve(port: number): void {
  console.log("server started");
  for (const user of users) {
    handleRequest(`token-${port}`, user);
  }
}

const port = 3000;
const users: User[] = [];

let me: User = { id: 1, name: "me", role: "guest", permissions: ["read"] };
users.push(me);
users.push({ id: 42, name: "alice", role: "admin", permissions: ["read", "admin"] });

// TODO: read the port from the arguments
// FIXME: greet the user by name
console.log(me.naem);

function describe(user: User): string {
  return `${user.name} (${user.role})`;
}

function audit(line: string): void {
  // Every decision is printed: the run's output is its log.
  console.log(line);
}

// Each request is checked twice: the token, then the user.
// (Line numbers here are the ones seed 004's examples use.)
// A request passes when both hold and the user may do
// something at all. The breakpoint of seed 004's
// example is the line that decides it (42), where
// `user` is in scope.

export function handleRequest(token: string, user: User): boolean {
  const checked = validateToken(token) && validateUser(user);
  const isValid = checked && user.permissions.length > 0;
  const result = isValid ? "allowed" : "denied";
  audit(`${describe(user)}: ${result}`);
  return isValid;
}

serve(port);
