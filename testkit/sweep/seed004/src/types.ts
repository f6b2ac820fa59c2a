// The people who use the app.

export interface User {
  id: number;
  name: string;
  role: string;
  permissions: string[];
}
