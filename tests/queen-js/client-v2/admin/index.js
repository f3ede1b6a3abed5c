/**
 * Admin module exports
 */

export { Admin } from './Admin.js'

