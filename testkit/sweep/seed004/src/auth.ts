import { User } from "./types";

export function validateToken(token: string): boolean {
  return token.startsWith("token-");
}

export function validateUser(u: User): boolean {
  return u.role.length > 0;
}
